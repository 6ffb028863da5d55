# shellcheck shell=bash
# Functions shared by fleet_boot.sh (EC2 user data) and notebook_on_start.sh (SageMaker notebook
# lifecycle configuration). The CDK constructs inline this file where the scripts source it, so each
# rendered script is one self-contained file; the tests source it from disk.
#
# Every check returns non-zero on failure and leaves a one-line explanation in FAIL_REASON.

FAIL_REASON=""

# The Lustre fstab options of the FSx for Lustre user guide ("Mounting Amazon FSx file systems
# automatically"): mount after the network is up, and let systemd retry on access.
LUSTRE_FSTAB_OPTIONS="defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service"
# Options of a direct mount (no fstab entry), as in the guide's "mount -t lustre" example.
LUSTRE_MOUNT_OPTIONS="relatime,flock"

log() {
  local line stamp
  printf -v stamp '%(%Y-%m-%dT%H:%M:%S%z)T' -1
  line="$stamp $*"
  printf '%s\n' "$line"
  if [ -n "${LOG_FILE:-}" ]; then
    printf '%s\n' "$line" >>"$LOG_FILE"
  fi
}

# log_block TITLE TEXT: log a multi-line command output, indented.
log_block() {
  local title=$1 text=$2 line
  log "$title"
  while IFS= read -r line; do
    log "  $line"
  done <<<"$text"
}

describe_failure() {
  printf '%s' "${FAIL_REASON:-unknown error}"
}

one_line() {
  printf '%s' "$1" | tr '\n' ' ' | sed 's/  */ /g; s/ $//'
}

# check_nvidia_smi EXPECTED: the driver answers and reports exactly EXPECTED GPUs.
check_nvidia_smi() {
  local expected=$1 out count
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    FAIL_REASON="nvidia-smi not found: the NVIDIA driver is not installed on this image"
    return 1
  fi
  if ! out=$(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1); then
    FAIL_REASON="nvidia-smi failed (driver not loaded or GPU unreachable): $(one_line "$out")"
    return 1
  fi
  log_block "nvidia-smi reports:" "$out"
  count=$(printf '%s\n' "$out" | grep -c '[^[:space:]]')
  if [ "$count" -ne "$expected" ]; then
    FAIL_REASON="nvidia-smi shows $count GPU(s) but this instance type has $expected"
    return 1
  fi
  log "nvidia-smi: $count GPU(s), as expected"
}

# find_torch_python [CANDIDATE...]: print the first interpreter that can import torch.
find_torch_python() {
  local candidate
  for candidate in "${TORCH_PYTHON:-}" "$@"; do
    if [ -z "$candidate" ] || ! command -v "$candidate" >/dev/null 2>&1; then
      continue
    fi
    if "$candidate" -c 'import torch' >/dev/null 2>&1; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}

# check_torch PYTHON EXPECTED: torch sees EXPECTED GPUs and runs a small kernel on each.
check_torch() {
  local python=$1 expected=$2 out
  if ! out=$("$python" - "$expected" 2>&1 <<'PY'
import sys

import torch

expected = int(sys.argv[1])
build = f"torch {torch.__version__} (CUDA build {torch.version.cuda})"
if not torch.cuda.is_available():
    sys.exit(f"{build}: torch.cuda.is_available() is False")
count = torch.cuda.device_count()
if count != expected:
    sys.exit(f"{build} sees {count} GPU(s), expected {expected}")
for index in range(count):
    value = torch.ones(1024, device=f"cuda:{index}").sum().item()
    if value != 1024:
        sys.exit(f"{build}: a test kernel on cuda:{index} returned {value}, expected 1024")
print(f"{build} sees {count} GPU(s); a test kernel ran on each")
PY
  ); then
    FAIL_REASON="torch GPU check failed with $python: $(one_line "$out")"
    return 1
  fi
  log "$out"
}

# Paths of the Ubuntu install, overridable for tests.
APT_KEYRING_DIR=${APT_KEYRING_DIR:-/usr/share/keyrings}
APT_SOURCES_DIR=${APT_SOURCES_DIR:-/etc/apt/sources.list.d}
OS_RELEASE=${OS_RELEASE:-/etc/os-release}

# install_lustre_client_apt: the FSx for Lustre user guide's Ubuntu install ("Installing the Lustre
# client"): the Amazon FSx apt repository for this release's codename, signed with its public key, then the
# client modules built for the running kernel. Needs a route to the internet (NAT).
install_lustre_client_apt() {
  local key=https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc
  local keyring="$APT_KEYRING_DIR/fsx-ubuntu-public-key.gpg" codename out
  codename=$(sed -n 's/^VERSION_CODENAME=["'"'"']\{0,1\}\([a-z]*\).*/\1/p' "$OS_RELEASE")
  mkdir -p "$APT_KEYRING_DIR" "$APT_SOURCES_DIR"
  if ! out=$(curl -sSf "$key" | gpg --batch --yes --dearmor -o "$keyring" 2>&1); then
    FAIL_REASON="cannot fetch the FSx repository key $key (no NAT path?): $(one_line "$out")"
    return 1
  fi
  echo "deb [signed-by=$keyring] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $codename main" \
    >"$APT_SOURCES_DIR/fsxlustreclientrepo.list"
  if ! out=$(apt-get update 2>&1); then
    FAIL_REASON="apt-get update failed: $(one_line "$out")"
    return 1
  fi
  if ! out=$(DEBIAN_FRONTEND=noninteractive apt-get install -y "lustre-client-modules-$(uname -r)" 2>&1); then
    FAIL_REASON="apt-get install lustre-client-modules-$(uname -r) failed: $(one_line "$out")"
    return 1
  fi
}

# install_lustre_client: the FSx for Lustre user guide's install for this distribution: dnf on Amazon
# Linux 2023 (its repositories are in the Region's S3), amazon-linux-extras on Amazon Linux 2 (notebook
# instances), the FSx apt repository on Ubuntu.
install_lustre_client() {
  log "mount.lustre not found; installing the Lustre client"
  if command -v dnf >/dev/null 2>&1; then
    dnf install -y lustre-client
  elif command -v amazon-linux-extras >/dev/null 2>&1; then
    amazon-linux-extras install -y lustre
  elif command -v apt-get >/dev/null 2>&1; then
    install_lustre_client_apt
  fi
  if ! command -v mount.lustre >/dev/null 2>&1; then
    FAIL_REASON="the Lustre client (mount.lustre) is not installed and could not be installed${FAIL_REASON:+: $FAIL_REASON}"
    return 1
  fi
}

# mount_lustre DNS MOUNT_NAME PATH ATTEMPTS DELAY_SECONDS [FSTAB]
# With FSTAB, the entry is added once and mounted from it; without, the file system is mounted directly.
# Retries because a new file system (or one in maintenance) refuses mounts for a while.
mount_lustre() {
  local dns=$1 mount_name=$2 path=$3 attempts=$4 delay=$5 fstab=${6:-}
  local source="${dns}@tcp:/${mount_name}" attempt=1 out
  if ! command -v mount.lustre >/dev/null 2>&1; then
    FAIL_REASON=""
    install_lustre_client || return 1
  fi
  if ! mkdir -p "$path"; then
    FAIL_REASON="cannot create the mount point $path"
    return 1
  fi
  if [ -n "$fstab" ] && ! grep -qsF "$source $path lustre " "$fstab"; then
    printf '%s %s lustre %s 0 0\n' "$source" "$path" "$LUSTRE_FSTAB_OPTIONS" >>"$fstab"
    log "added $source to $fstab"
  fi
  local -a command
  if [ -n "$fstab" ]; then
    command=(mount -T "$fstab" "$path")
  else
    command=(mount -t lustre -o "$LUSTRE_MOUNT_OPTIONS" "$source" "$path")
  fi
  while :; do
    if out=$("${command[@]}" 2>&1); then
      log "mounted $source at $path (attempt $attempt/$attempts)"
      return 0
    fi
    if [ "$attempt" -ge "$attempts" ]; then
      FAIL_REASON="could not mount $source at $path after $attempts attempts: $(one_line "$out")"
      return 1
    fi
    log "mount attempt $attempt/$attempts of $source failed ($(one_line "$out")); retrying in ${delay}s"
    attempt=$((attempt + 1))
    sleep "$delay"
  done
}
