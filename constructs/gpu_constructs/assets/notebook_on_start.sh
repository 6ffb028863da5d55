#!/bin/bash
# OnStart lifecycle script of a GPU notebook instance (runs as root at every start; its output goes to
# the /aws/sagemaker/NotebookInstances log group, stream <notebook>/LifecycleConfigOnStart).
#
# The GpuNotebook construct renders it with its settings exported above this text. It:
#   1. checks the GPUs: nvidia-smi shows every GPU of the instance type, then torch (in the notebook's
#      PyTorch conda environment) sees every GPU and runs a kernel on each (skipped for a CPU type);
#   2. runs `gpuctl doctor` in that environment (installing the gpuctl package from S3 first when a
#      package URI is configured and gpuctl is not installed yet);
#   3. mounts FSx for Lustre, when configured, retrying while the file system is still starting.
# A failure exits non-zero, so the notebook does not start and the log says why: a notebook that was
# asked for a GPU but cannot use one fails loudly instead of silently computing on the CPU.
# SageMaker stops a lifecycle script after 5 minutes: keep LUSTRE_MOUNT_ATTEMPTS x LUSTRE_RETRY_SECONDS
# well below that.
#
# Settings (environment). Required: EXPECTED_GPUS, INSTANCE_TYPE (ml.*). Optional:
#   NOTEBOOK_NAME, AWS_REGION, GPUCTL_PACKAGE_URI (s3:// URI of a wheel that provides gpuctl),
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

install_gpuctl() {
  local package out region_args=()
  if "$TORCH_ENV_PYTHON" -m gpuctl --help >/dev/null 2>&1; then
    return 0
  fi
  if [ -z "$GPUCTL_PACKAGE_URI" ]; then
    FAIL_REASON="gpuctl is not installed in $TORCH_ENV_PYTHON and no GPUCTL_PACKAGE_URI is configured"
    return 1
  fi
  mkdir -p "$WORK_DIR"
  package="$WORK_DIR/${GPUCTL_PACKAGE_URI##*/}"
  if [ -n "$AWS_REGION" ]; then
    region_args=(--region "$AWS_REGION")
  fi
  if ! out=$(aws s3 cp ${region_args[@]+"${region_args[@]}"} --only-show-errors "$GPUCTL_PACKAGE_URI" "$package" 2>&1); then
    FAIL_REASON="cannot download $GPUCTL_PACKAGE_URI: $(one_line "$out")"
    return 1
  fi
  if ! out=$("$TORCH_ENV_PYTHON" -m pip install --no-deps --no-index --quiet "$package" 2>&1); then
    FAIL_REASON="cannot install $package: $(one_line "$out")"
    return 1
  fi
  log "installed gpuctl from $GPUCTL_PACKAGE_URI"
}

run_doctor() {
  local out
  install_gpuctl || return 1
  if ! out=$("$TORCH_ENV_PYTHON" -m gpuctl doctor --expect-gpus "$EXPECTED_GPUS" --instance-type "$INSTANCE_TYPE" 2>&1); then
    log_block "gpuctl doctor:" "$out"
    FAIL_REASON="gpuctl doctor reports a problem: $(one_line "$(printf '%s\n' "$out" | tail -n 1)")"
    return 1
  fi
  log_block "gpuctl doctor:" "$out"
}

main() {
  TORCH_ENV_PYTHON=""
  log "GPU notebook start of $NOTEBOOK_NAME ($INSTANCE_TYPE, $EXPECTED_GPUS GPU(s))"
  check_gpus || fail gpu
  run_doctor || fail doctor
  if [ -n "$LUSTRE_DNS_NAME" ]; then
    mount_lustre "$LUSTRE_DNS_NAME" "$LUSTRE_MOUNT_NAME" "$LUSTRE_MOUNT_PATH" \
      "$LUSTRE_MOUNT_ATTEMPTS" "$LUSTRE_RETRY_SECONDS" || fail lustre
  fi
  log "GPU notebook start of $NOTEBOOK_NAME succeeded"
}

main "$@"
