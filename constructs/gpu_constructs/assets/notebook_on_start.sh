#!/bin/bash
# OnStart lifecycle script of a GPU notebook instance (runs as root at every start; its output goes to
# the /aws/sagemaker/NotebookInstances log group, stream <notebook>/LifecycleConfigOnStart).
#
# The GpuNotebook construct renders it with its settings exported above this text. It:
#   1. checks the GPUs: nvidia-smi shows every GPU of the instance type, then torch (in the notebook's
#      PyTorch conda environment) sees every GPU and runs a kernel on each (skipped for a CPU type);
#   2. mounts FSx for Lustre, when configured, retrying while the file system is still starting;
#   3. optional: installs the gpuctl package (GPUCTL_PACKAGE_URI, a wheel in S3) into that environment
#      when gpuctl is missing, with pip and nothing but that file (no package index: the VPC may have no
#      internet path), then runs `gpuctl doctor` and logs its report.
# A failure of 1 or 2 exits non-zero, so the notebook does not start and the log says why: a notebook
# that was asked for a GPU but cannot use one fails loudly instead of silently computing on the CPU.
# Step 3 never fails the start: a missing object, a failed download or install, or a doctor finding is
# a log line saying what was skipped and why. SageMaker fails the start of a script that runs longer
# than 5 minutes, and AWS advises nohup for long work, so step 3 runs in the background (immune to
# SIGHUP, output in $WORK_DIR/gpuctl-setup.log); the script waits for it until START_BUDGET_SECONDS
# after its own start and copies its log here, or says that it goes on in the background.
#
# Settings (environment). Required: EXPECTED_GPUS, INSTANCE_TYPE (ml.*). Optional:
#   NOTEBOOK_NAME, AWS_REGION, GPUCTL_PACKAGE_URI (s3:// URI of a wheel that provides gpuctl),
#   GPUCTL_PACKAGE_FILE (its wheel file name, which pip needs) [last part of the URI],
#   START_BUDGET_SECONDS [240], STEP_TIMEOUT_SECONDS [120] (each download, install, doctor),
#   NOTEBOOK_USER [ec2-user] (pip runs as that user when the script runs as root),
#   LUSTRE_DNS_NAME, LUSTRE_MOUNT_NAME, LUSTRE_MOUNT_PATH [/home/ec2-user/SageMaker/fsx],
#   LUSTRE_MOUNT_ATTEMPTS [12], LUSTRE_RETRY_SECONDS [10], CONDA_DIR [/home/ec2-user/anaconda3],
#   TORCH_PYTHON (interpreter with torch), WORK_DIR [/tmp/gpu-notebook].

set -uo pipefail

# shellcheck source=gpu_lib.sh
. "${GPU_LIB:-$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh}"

EXPECTED_GPUS=${EXPECTED_GPUS:?EXPECTED_GPUS is required}
INSTANCE_TYPE=${INSTANCE_TYPE:?INSTANCE_TYPE is required}
NOTEBOOK_NAME=${NOTEBOOK_NAME:-notebook}
AWS_REGION=${AWS_REGION:-}
GPUCTL_PACKAGE_URI=${GPUCTL_PACKAGE_URI:-}
GPUCTL_PACKAGE_FILE=${GPUCTL_PACKAGE_FILE:-${GPUCTL_PACKAGE_URI##*/}}
START_BUDGET_SECONDS=${START_BUDGET_SECONDS:-240}
STEP_TIMEOUT_SECONDS=${STEP_TIMEOUT_SECONDS:-120}
NOTEBOOK_USER=${NOTEBOOK_USER-ec2-user}
LUSTRE_DNS_NAME=${LUSTRE_DNS_NAME:-}
LUSTRE_MOUNT_NAME=${LUSTRE_MOUNT_NAME:-}
LUSTRE_MOUNT_PATH=${LUSTRE_MOUNT_PATH:-/home/ec2-user/SageMaker/fsx}
LUSTRE_MOUNT_ATTEMPTS=${LUSTRE_MOUNT_ATTEMPTS:-12}
LUSTRE_RETRY_SECONDS=${LUSTRE_RETRY_SECONDS:-10}
CONDA_DIR=${CONDA_DIR:-/home/ec2-user/anaconda3}
WORK_DIR=${WORK_DIR:-/tmp/gpu-notebook}

fail() {
  log "GPU notebook start FAILED at stage '$1' on $NOTEBOOK_NAME ($INSTANCE_TYPE): $(describe_failure)"
  exit 1
}

# The PyTorch conda environments first (pytorch_p310, ...), then any other environment.
torch_python_candidates() {
  local python
  for python in "$CONDA_DIR"/envs/pytorch*/bin/python "$CONDA_DIR"/envs/*/bin/python "$CONDA_DIR"/bin/python; do
    if [ -x "$python" ]; then
      printf '%s\n' "$python"
    fi
  done
}

check_gpus() {
  local -a candidates
  mapfile -t candidates < <(torch_python_candidates)
  # ${a[@]+"${a[@]}"}: an empty array under `set -u` on bash 4.2 (Amazon Linux 2 notebooks).
  if ! TORCH_ENV_PYTHON=$(find_torch_python ${candidates[@]+"${candidates[@]}"}); then
    FAIL_REASON="no conda environment with torch under $CONDA_DIR/envs (and TORCH_PYTHON not set)"
    return 1
  fi
  if [ "$EXPECTED_GPUS" -eq 0 ]; then
    log "no GPU requested (CPU notebook type): GPU check skipped"
    return 0
  fi
  check_nvidia_smi "$EXPECTED_GPUS" || return 1
  check_torch "$TORCH_ENV_PYTHON" "$EXPECTED_GPUS"
}

# bounded COMMAND...: at most STEP_TIMEOUT_SECONDS; its output in OUT, a timeout says so.
bounded() {
  local rc=0
  OUT=$(timeout "$STEP_TIMEOUT_SECONDS" "$@" 2>&1) || rc=$?
  if [ "$rc" -eq 124 ]; then
    OUT="timed out after ${STEP_TIMEOUT_SECONDS}s ${OUT}"
  fi
  return "$rc"
}

install_gpuctl() {
  local package region_args=() as_user=()
  package="$WORK_DIR/$GPUCTL_PACKAGE_FILE"
  # pip as the notebook's user (when running as root and the user exists): the environment keeps one owner.
  if [ "$(id -u)" -eq 0 ] && [ -n "$NOTEBOOK_USER" ] && id "$NOTEBOOK_USER" >/dev/null 2>&1; then
    as_user=(sudo -u "$NOTEBOOK_USER" -H --)
  fi
  if [ -n "$AWS_REGION" ]; then
    region_args=(--region "$AWS_REGION")
  fi
  if ! bounded aws s3 cp ${region_args[@]+"${region_args[@]}"} --only-show-errors "$GPUCTL_PACKAGE_URI" "$package"; then
    FAIL_REASON="cannot download $GPUCTL_PACKAGE_URI: $(one_line "$OUT")"
    return 1
  fi
  chmod 644 "$package"
  # Only this file: no package index (the VPC may have no internet path), no dependencies to resolve.
  if ! bounded ${as_user[@]+"${as_user[@]}"} "$TORCH_ENV_PYTHON" -m pip install --no-index --no-deps --no-cache-dir \
    --disable-pip-version-check --quiet "$package"; then
    FAIL_REASON="pip cannot install $GPUCTL_PACKAGE_FILE into $TORCH_ENV_PYTHON: $(one_line "$OUT")"
    return 1
  fi
  log "installed $GPUCTL_PACKAGE_FILE from $GPUCTL_PACKAGE_URI into $TORCH_ENV_PYTHON (pip, no index)"
}

# The optional step (background): every outcome is a log line, none fails the start.
gpuctl_setup() {
  if "$TORCH_ENV_PYTHON" -m gpuctl --help >/dev/null 2>&1; then
    log "gpuctl is already installed in $TORCH_ENV_PYTHON: install skipped"
  elif [ -z "$GPUCTL_PACKAGE_URI" ]; then
    log "SKIPPED gpuctl install and doctor: gpuctl is not in $TORCH_ENV_PYTHON and no package is configured"
    return 0
  elif ! install_gpuctl; then
    log "SKIPPED gpuctl install and doctor: $(describe_failure)"
    return 0
  fi
  if bounded "$TORCH_ENV_PYTHON" -m gpuctl doctor --expect-gpus "$EXPECTED_GPUS" --instance-type "$INSTANCE_TYPE"; then
    log_block "gpuctl doctor:" "$OUT"
  else
    log_block "gpuctl doctor:" "$OUT"
    log "WARNING gpuctl doctor reports a problem (the start goes on): $(one_line "$(printf '%s\n' "$OUT" | tail -n 1)")"
  fi
}

# Start the optional step in the background and wait for it until START_BUDGET_SECONDS.
run_gpuctl_setup() {
  local setup_log="$WORK_DIR/gpuctl-setup.log" pid
  if ! mkdir -p "$WORK_DIR" || ! chmod 755 "$WORK_DIR" || ! : >"$setup_log"; then
    log "SKIPPED gpuctl install and doctor: cannot write $setup_log"
    return 0
  fi
  # Like nohup: SIGHUP ignored, no terminal, output to a file, so it outlives this script if it must.
  (
    trap '' HUP
    gpuctl_setup
  ) </dev/null >"$setup_log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$START_BUDGET_SECONDS" ]; do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "gpuctl install and doctor go on in the background (pid $pid) past the start budget of" \
      "${START_BUDGET_SECONDS}s; log: $setup_log"
  else
    log "gpuctl install and doctor (optional, never fail the start):"
    sed 's/^/  /' "$setup_log"
  fi
}

main() {
  TORCH_ENV_PYTHON=""
  log "GPU notebook start of $NOTEBOOK_NAME ($INSTANCE_TYPE, $EXPECTED_GPUS GPU(s))"
  check_gpus || fail gpu
  if [ -n "$LUSTRE_DNS_NAME" ]; then
    mount_lustre "$LUSTRE_DNS_NAME" "$LUSTRE_MOUNT_NAME" "$LUSTRE_MOUNT_PATH" \
      "$LUSTRE_MOUNT_ATTEMPTS" "$LUSTRE_RETRY_SECONDS" || fail lustre
  fi
  run_gpuctl_setup
  log "GPU notebook start of $NOTEBOOK_NAME succeeded"
}

main "$@"
