#!/bin/bash
# Boot script of a GPU fleet instance (EC2 user data, run once as root at first boot).
#
# The GpuFleet construct renders it with its settings exported above this text. In order it:
#   1. reads the instance id from the instance metadata service (IMDSv2);
#   2. starts monitoring: a unit that copies kernel messages (NVIDIA Xid errors) to a log file, and the
#      CloudWatch agent with the nvidia_gpu metrics aggregated per auto scaling group plus the logs;
#   3. formats (first boot only) and mounts the EBS data volume, when the fleet has one;
#   4. mounts FSx for Lustre through /etc/fstab, retrying while the file system is still starting (a
#      DLAMI without the client installs it first, the FSx for Lustre user guide's way: dnf on Amazon
#      Linux 2023, the FSx apt repository on Ubuntu, which needs a NAT path; GpuFleet checks that at synth);
#   5. checks the GPUs: nvidia-smi shows every GPU of the instance type, then torch sees every GPU and
#      runs a kernel on each;
#   6. signals readiness by completing the launch lifecycle hook (CONTINUE).
# Any failure is logged as "GPU fleet boot FAILED", marks the instance Unhealthy and abandons the
# lifecycle action, so the auto scaling group replaces it. If the script dies or hangs, the hook's
# heartbeat timeout abandons the launch the same way.
#
# Settings (environment). Required: FLEET_NAME, ASG_NAME, EXPECTED_GPUS, AWS_REGION. Optional:
#   LIFECYCLE_HOOK_NAME     launch hook to complete (empty: no hook)
#   TORCH_CHECK             required | auto (run when an interpreter has torch) | off   [auto]
#   TORCH_PYTHON            interpreter with torch                   [/opt/pytorch/bin/python, python3]
#   LUSTRE_DNS_NAME, LUSTRE_MOUNT_NAME, LUSTRE_MOUNT_PATH [/fsx], LUSTRE_MOUNT_ATTEMPTS [30],
#   LUSTRE_RETRY_SECONDS [10]
#   DATA_MOUNT_PATH         mount point of the EBS data volume (empty: no data volume), DATA_FS_TYPE [xfs]
#   LOG_GROUP_NAME          log group of the boot and kernel logs (empty: metrics only)
#   CW_NAMESPACE [CWAgent], METRICS_INTERVAL_SECONDS [60]
# Paths, overridable for tests: LOG_DIR [/var/log/gpu-fleet], STATE_DIR [/var/lib/gpu-fleet],
#   FSTAB [/etc/fstab], CW_AGENT_CONFIG_DIR [/opt/aws/amazon-cloudwatch-agent/etc],
#   SYSTEMD_UNIT_DIR [/etc/systemd/system], IMDS_ENDPOINT [http://169.254.169.254],
#   FLUSH_WAIT_SECONDS [20] (time for the agent to ship the failure log before the instance goes).
#   Lustre client install (gpu_lib.sh): OS_RELEASE [/etc/os-release], APT_KEYRING_DIR [/usr/share/keyrings],
#   APT_SOURCES_DIR [/etc/apt/sources.list.d], FSX_UBUNTU_KEY_URL, FSX_UBUNTU_REPO_URL.

set -uo pipefail

# shellcheck source=gpu_lib.sh
. "${GPU_LIB:-$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh}"

FLEET_NAME=${FLEET_NAME:?FLEET_NAME is required}
ASG_NAME=${ASG_NAME:?ASG_NAME is required}
EXPECTED_GPUS=${EXPECTED_GPUS:?EXPECTED_GPUS is required}
AWS_REGION=${AWS_REGION:?AWS_REGION is required}
LIFECYCLE_HOOK_NAME=${LIFECYCLE_HOOK_NAME:-}
TORCH_CHECK=${TORCH_CHECK:-auto}
LUSTRE_DNS_NAME=${LUSTRE_DNS_NAME:-}
LUSTRE_MOUNT_NAME=${LUSTRE_MOUNT_NAME:-}
LUSTRE_MOUNT_PATH=${LUSTRE_MOUNT_PATH:-/fsx}
LUSTRE_MOUNT_ATTEMPTS=${LUSTRE_MOUNT_ATTEMPTS:-30}
LUSTRE_RETRY_SECONDS=${LUSTRE_RETRY_SECONDS:-10}
DATA_MOUNT_PATH=${DATA_MOUNT_PATH:-}
DATA_FS_TYPE=${DATA_FS_TYPE:-xfs}
LOG_GROUP_NAME=${LOG_GROUP_NAME:-}
CW_NAMESPACE=${CW_NAMESPACE:-CWAgent}
METRICS_INTERVAL_SECONDS=${METRICS_INTERVAL_SECONDS:-60}
LOG_DIR=${LOG_DIR:-/var/log/gpu-fleet}
STATE_DIR=${STATE_DIR:-/var/lib/gpu-fleet}
FSTAB=${FSTAB:-/etc/fstab}
CW_AGENT_CONFIG_DIR=${CW_AGENT_CONFIG_DIR:-/opt/aws/amazon-cloudwatch-agent/etc}
SYSTEMD_UNIT_DIR=${SYSTEMD_UNIT_DIR:-/etc/systemd/system}
IMDS_ENDPOINT=${IMDS_ENDPOINT:-http://169.254.169.254}
FLUSH_WAIT_SECONDS=${FLUSH_WAIT_SECONDS:-20}

mkdir -p "$LOG_DIR" "$STATE_DIR"
LOG_FILE="$LOG_DIR/boot.log"
KERNEL_LOG="$LOG_DIR/kernel.log"
INSTANCE_ID=""

# ------------------------------------------------------------------------------------------ lifecycle

complete_lifecycle_action() {
  local result=$1
  if [ -z "$LIFECYCLE_HOOK_NAME" ]; then
    return 0
  fi
  aws autoscaling complete-lifecycle-action --region "$AWS_REGION" \
    --auto-scaling-group-name "$ASG_NAME" --lifecycle-hook-name "$LIFECYCLE_HOOK_NAME" \
    --instance-id "$INSTANCE_ID" --lifecycle-action-result "$result"
}

fail() {
  local stage=$1
  log "GPU fleet boot FAILED at stage '$stage' on ${INSTANCE_ID:-an unknown instance} ($FLEET_NAME): $(describe_failure)"
  if [ -z "$INSTANCE_ID" ]; then
    log "no instance id: leaving the launch to the lifecycle hook's heartbeat timeout (ABANDON)"
    exit 1
  fi
  if [ "$FLUSH_WAIT_SECONDS" -gt 0 ]; then
    sleep "$FLUSH_WAIT_SECONDS"
  fi
  if aws autoscaling set-instance-health --region "$AWS_REGION" --instance-id "$INSTANCE_ID" \
    --health-status Unhealthy --no-should-respect-grace-period; then
    log "marked $INSTANCE_ID Unhealthy: the auto scaling group replaces it"
  else
    log "could not mark $INSTANCE_ID Unhealthy (still Pending?); abandoning the launch instead"
  fi
  if ! complete_lifecycle_action ABANDON; then
    log "could not abandon the lifecycle action; the heartbeat timeout abandons it"
  fi
  exit 1
}

# ------------------------------------------------------------------------------------------- metadata

imds() {
  local token
  token=$(curl -sSf -X PUT "$IMDS_ENDPOINT/latest/api/token" \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 300') || return 1
  curl -sSf -H "X-aws-ec2-metadata-token: $token" "$IMDS_ENDPOINT/latest/meta-data/$1"
}

read_instance_id() {
  if ! INSTANCE_ID=$(imds instance-id) || [ -z "$INSTANCE_ID" ]; then
    INSTANCE_ID=""
    FAIL_REASON="cannot read the instance id from the instance metadata service (IMDSv2)"
    return 1
  fi
  log "instance $INSTANCE_ID of auto scaling group $ASG_NAME (fleet $FLEET_NAME), expecting $EXPECTED_GPUS GPU(s)"
}

# ----------------------------------------------------------------------------------------- monitoring

start_kernel_log() {
  local unit="$SYSTEMD_UNIT_DIR/gpu-kernel-log.service"
  mkdir -p "$SYSTEMD_UNIT_DIR"
  cat >"$unit" <<EOF
[Unit]
Description=Copy kernel messages (NVIDIA Xid errors) to $KERNEL_LOG for the CloudWatch agent
After=systemd-journald.service

[Service]
ExecStart=/bin/sh -c 'exec journalctl --dmesg --follow --output=short-iso --cursor-file=$STATE_DIR/kernel.cursor >>$KERNEL_LOG'
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF
  if ! systemctl daemon-reload || ! systemctl enable --now gpu-kernel-log.service; then
    FAIL_REASON="cannot start gpu-kernel-log.service"
    return 1
  fi
}

cloudwatch_agent_ctl() {
  local ctl
  for ctl in amazon-cloudwatch-agent-ctl /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl; do
    if command -v "$ctl" >/dev/null 2>&1; then
      printf '%s\n' "$ctl"
      return 0
    fi
  done
  return 1
}

install_cloudwatch_agent() {
  local arch package
  log "installing the CloudWatch agent"
  if command -v dnf >/dev/null 2>&1; then
    dnf install -y amazon-cloudwatch-agent
  elif command -v dpkg >/dev/null 2>&1; then
    case "$(uname -m)" in
      aarch64) arch=arm64 ;;
      *) arch=amd64 ;;
    esac
    package="$STATE_DIR/amazon-cloudwatch-agent.deb"
    # The regional download bucket, reachable through the VPC's S3 gateway endpoint.
    curl -sSf -o "$package" \
      "https://amazoncloudwatch-agent-$AWS_REGION.s3.$AWS_REGION.amazonaws.com/ubuntu/$arch/latest/amazon-cloudwatch-agent.deb" \
      && dpkg -i -E "$package"
  else
    return 1
  fi
}

write_cloudwatch_agent_config() {
  local config=$1 logs=""
  if [ -n "$LOG_GROUP_NAME" ]; then
    logs=$(cat <<EOF
  "logs": {
    "logs_collected": {
      "files": {
        "collect_list": [
          {"file_path": "$LOG_FILE", "log_group_name": "$LOG_GROUP_NAME",
           "log_stream_name": "{instance_id}/boot"},
          {"file_path": "$KERNEL_LOG", "log_group_name": "$LOG_GROUP_NAME",
           "log_stream_name": "{instance_id}/kernel"}
        ]
      }
    }
  },
EOF
    )
  fi
  cat >"$config" <<EOF
{
  "agent": {"metrics_collection_interval": $METRICS_INTERVAL_SECONDS, "run_as_user": "root"},
$logs
  "metrics": {
    "namespace": "$CW_NAMESPACE",
    "append_dimensions": {"InstanceId": "\${aws:InstanceId}"},
    "aggregation_dimensions": [["AutoScalingGroupName"], ["AutoScalingGroupName", "InstanceId"]],
    "metrics_collected": {
      "nvidia_gpu": {
        "measurement": [
          {"name": "utilization_gpu", "unit": "Percent"},
          {"name": "utilization_memory", "unit": "Percent"},
          {"name": "memory_used", "unit": "Megabytes"},
          {"name": "memory_total", "unit": "Megabytes"},
          {"name": "temperature_gpu", "unit": "None"},
          {"name": "power_draw", "unit": "None"}
        ],
        "metrics_collection_interval": $METRICS_INTERVAL_SECONDS,
        "append_dimensions": {"AutoScalingGroupName": "$ASG_NAME"}
      }
    }
  }
}
EOF
}

start_cloudwatch_agent() {
  local ctl config="$CW_AGENT_CONFIG_DIR/amazon-cloudwatch-agent.json" out
  if ! ctl=$(cloudwatch_agent_ctl); then
    if ! install_cloudwatch_agent || ! ctl=$(cloudwatch_agent_ctl); then
      FAIL_REASON="the CloudWatch agent is not installed and could not be installed"
      return 1
    fi
  fi
  mkdir -p "$CW_AGENT_CONFIG_DIR"
  write_cloudwatch_agent_config "$config"
  if ! out=$("$ctl" -a fetch-config -m ec2 -s -c "file:$config" 2>&1); then
    FAIL_REASON="the CloudWatch agent did not start: $(one_line "$out")"
    return 1
  fi
  log "CloudWatch agent running: nvidia_gpu metrics in $CW_NAMESPACE per AutoScalingGroupName=$ASG_NAME"
}

start_monitoring() {
  start_kernel_log && start_cloudwatch_agent
}

# ---------------------------------------------------------------------------------------- data volume

# The data volume is the EBS disk without partitions and without a mounted file system (the root disk
# has both). NVMe device names are not stable, so the block device mapping name cannot be used.
find_data_device() {
  local name model
  while read -r name model; do
    case "$model" in
      *"Elastic Block Store"*) ;;
      *) continue ;;
    esac
    if [ "$(lsblk -nro NAME "$name" | grep -c .)" -gt 1 ]; then
      continue
    fi
    if [ -n "$(lsblk -nro MOUNTPOINT "$name" | tr -d '[:space:]')" ]; then
      continue
    fi
    printf '%s\n' "$name"
    return 0
  done < <(lsblk -dnpo NAME,MODEL)
  return 1
}

mount_data_volume() {
  local device fs uuid out
  if ! device=$(find_data_device); then
    FAIL_REASON="no unmounted EBS data volume found for $DATA_MOUNT_PATH"
    return 1
  fi
  fs=$(blkid -o value -s TYPE "$device" || true)
  if [ -z "$fs" ]; then
    log "formatting the new data volume $device as $DATA_FS_TYPE"
    if ! out=$(mkfs -t "$DATA_FS_TYPE" "$device" 2>&1); then
      FAIL_REASON="mkfs -t $DATA_FS_TYPE $device failed: $(one_line "$out")"
      return 1
    fi
    fs=$DATA_FS_TYPE
  fi
  uuid=$(blkid -o value -s UUID "$device")
  mkdir -p "$DATA_MOUNT_PATH"
  if ! grep -qsF "UUID=$uuid " "$FSTAB"; then
    printf 'UUID=%s %s %s defaults,nofail 0 2\n' "$uuid" "$DATA_MOUNT_PATH" "$fs" >>"$FSTAB"
  fi
  if ! out=$(mount -T "$FSTAB" "$DATA_MOUNT_PATH" 2>&1); then
    FAIL_REASON="cannot mount the data volume $device at $DATA_MOUNT_PATH: $(one_line "$out")"
    return 1
  fi
  log "mounted the data volume $device ($fs) at $DATA_MOUNT_PATH"
}

# ----------------------------------------------------------------------------------------------- gpus

check_gpus() {
  local python
  check_nvidia_smi "$EXPECTED_GPUS" || return 1
  case "$TORCH_CHECK" in
    off)
      log "torch check disabled (TORCH_CHECK=off)"
      return 0
      ;;
    required | auto) ;;
    *)
      FAIL_REASON="TORCH_CHECK=$TORCH_CHECK is not one of required, auto, off"
      return 1
      ;;
  esac
  if ! python=$(find_torch_python /opt/pytorch/bin/python python3); then
    if [ "$TORCH_CHECK" = required ]; then
      FAIL_REASON="no Python interpreter with torch found (TORCH_PYTHON, /opt/pytorch/bin/python, python3)"
      return 1
    fi
    log "no Python interpreter with torch on this image (base DLAMI): torch check skipped"
    return 0
  fi
  check_torch "$python" "$EXPECTED_GPUS"
}

# ----------------------------------------------------------------------------------------------- main

main() {
  log "GPU fleet boot of $FLEET_NAME starting"
  read_instance_id || fail metadata
  start_monitoring || fail monitoring
  if [ -n "$DATA_MOUNT_PATH" ]; then
    mount_data_volume || fail data-volume
  fi
  if [ -n "$LUSTRE_DNS_NAME" ]; then
    mount_lustre "$LUSTRE_DNS_NAME" "$LUSTRE_MOUNT_NAME" "$LUSTRE_MOUNT_PATH" \
      "$LUSTRE_MOUNT_ATTEMPTS" "$LUSTRE_RETRY_SECONDS" "$FSTAB" || fail lustre
  fi
  check_gpus || fail gpu
  if ! complete_lifecycle_action CONTINUE; then
    FAIL_REASON="complete-lifecycle-action CONTINUE failed"
    fail ready
  fi
  log "GPU fleet boot of $FLEET_NAME succeeded: $INSTANCE_ID is ready"
}

main "$@"
