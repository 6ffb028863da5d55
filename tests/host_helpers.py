"""A fake instance for the boot and start scripts' tests: every external command a script uses on an instance
is a small fake on PATH that records its arguments, torch a fake package driven by environment variables, the
script's paths redirected into a temporary directory. Shared by the fleet boot script's and the notebook's tests.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "constructs" / "gpu_constructs" / "assets"
BOOT = ASSETS / "fleet_boot.sh"
INSTANCE_ID = "i-0123456789abcdef0"
ASG = "gpu-dev-workbench"
DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"

# --------------------------------------------------------------------------------------------------
# Fake host
# --------------------------------------------------------------------------------------------------

_RECORD = 'printf "%s %s\\n" "$(basename "$0")" "$*" >>"$FAKE_CALLS"\n'

FAKES: dict[str, str] = {
    "curl": _RECORD
    + """case "$*" in
  *api/token*) [ "${FAKE_IMDS_FAIL:-0}" = 1 ] && exit 7; printf 'TOKEN' ;;
  *meta-data/instance-id*) printf '%s' "$FAKE_INSTANCE_ID" ;;
  *fsx-ubuntu-public-key.asc*) [ "${FAKE_NO_INTERNET:-0}" = 1 ] && exit 28; printf 'ARMORED KEY' ;;
  *) exit 22 ;;
esac
""",
    "aws": _RECORD
    + """if [ -n "${FAKE_AWS_FAIL:-}" ]; then
  case "$*" in *"$FAKE_AWS_FAIL"*) echo "An error occurred (ValidationError)" >&2; exit 254 ;; esac
fi
""",
    "nvidia-smi": _RECORD
    + """if [ "${FAKE_NVSMI_FAIL:-0}" = 1 ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
  exit 9
fi
i=0
while [ "$i" -lt "${FAKE_GPUS:-1}" ]; do
  echo "$i, NVIDIA A10G, 570.86.15, 23028 MiB"
  i=$((i + 1))
done
""",
    "mount": _RECORD
    + """count_file="$FAKE_STATE/mount.count"
n=$(cat "$count_file" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$count_file"
if [ "${FAKE_MOUNT_ALWAYS_FAIL:-0}" = 1 ] || [ "$n" -le "${FAKE_MOUNT_FAILURES:-0}" ]; then
  echo "mount.lustre: mount failed: Input/output error" >&2
  exit 32
fi
""",
    "mount.lustre": _RECORD,
    "amazon-cloudwatch-agent-ctl": _RECORD
    + """if [ "${FAKE_AGENT_FAIL:-0}" = 1 ]; then echo "E! invalid json in config" >&2; exit 1; fi
""",
    "systemctl": _RECORD,
    "dnf": _RECORD
    + """for cmd in ${FAKE_DNF_PROVIDES:-}; do
  printf '#!/bin/bash\\nprintf "%%s %%s\\\\n" "$(basename "$0")" "$*" >>"$FAKE_CALLS"\\n' >"$FAKE_BIN/$cmd"
  chmod +x "$FAKE_BIN/$cmd"
done
[ -n "${FAKE_DNF_PROVIDES:-}" ] || { echo "No match for argument" >&2; exit 1; }
""",
    "apt-get": _RECORD
    + """case "$1" in
  update) exit "${FAKE_APT_UPDATE_RC:-0}" ;;
  install)
    for cmd in ${FAKE_APT_PROVIDES:-}; do
      printf '#!/bin/bash\\nprintf "%%s %%s\\\\n" "$(basename "$0")" "$*" >>"$FAKE_CALLS"\\n' >"$FAKE_BIN/$cmd"
      chmod +x "$FAKE_BIN/$cmd"
    done
    [ -n "${FAKE_APT_PROVIDES:-}" ] || { echo "E: Unable to locate package" >&2; exit 100; } ;;
esac
""",
    "gpg": _RECORD
    + """out=""
while [ $# -gt 0 ]; do
  case "$1" in -o) out=$2; shift ;; esac
  shift
done
cat >"$out"
""",
    "uname": _RECORD
    + """case "$1" in
  -r) echo "${FAKE_KERNEL:-6.17.0-1020-aws}" ;;
  *) exec /usr/bin/env -i PATH=/usr/bin:/bin uname "$@" ;;
esac
""",
    "lsblk": _RECORD
    + """case "$*" in
  "-dnpo NAME,MODEL")
    echo "/dev/nvme0n1 Amazon Elastic Block Store"
    [ "${FAKE_NO_DATA_DISK:-0}" = 1 ] || echo "/dev/nvme1n1 Amazon Elastic Block Store"
    echo "/dev/nvme2n1 Amazon EC2 NVMe Instance Storage" ;;
  "-nro NAME /dev/nvme0n1") printf 'nvme0n1\\nnvme0n1p1\\n' ;;
  "-nro MOUNTPOINT /dev/nvme0n1") printf '\\n/\\n' ;;
  "-nro NAME /dev/nvme1n1") echo nvme1n1 ;;
  "-nro MOUNTPOINT /dev/nvme1n1") echo ;;
esac
""",
    "blkid": _RECORD
    + """case "$*" in
  *"-s TYPE"*) [ -f "$FAKE_STATE/formatted" ] && echo xfs || exit 2 ;;
  *"-s UUID"*) echo 0f5c9a2e-1111-4a8d-9c3b-2c4b7a1e0d11 ;;
esac
""",
    "mkfs": _RECORD + 'touch "$FAKE_STATE/formatted"\n',
}

FAKE_TORCH = '''"""A stand-in for torch: CUDA facts come from FAKE_TORCH_* environment variables."""
import os

__version__ = "2.9.0+fake"


class version:
    cuda = "12.8"


class _Cuda:
    @staticmethod
    def is_available():
        return os.environ.get("FAKE_TORCH_CUDA", "1") == "1"

    @staticmethod
    def device_count():
        return int(os.environ.get("FAKE_TORCH_GPUS", "1"))


cuda = _Cuda()


class _Value:
    def __init__(self, value):
        self._value = value

    def item(self):
        return self._value


class _Tensor:
    def __init__(self, n, device):
        self._n = 0 if os.environ.get("FAKE_TORCH_BAD_DEVICE") == device else n

    def sum(self):
        return _Value(float(self._n))


def ones(n, device=None):
    if device not in [f"cuda:{i}" for i in range(cuda.device_count())]:
        raise RuntimeError(f"CUDA error: invalid device ordinal {device}")
    return _Tensor(n, device)
'''


@dataclass
class Run:
    rc: int
    output: str
    calls: list[str]
    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def called(self, prefix: str) -> list[str]:
        return [c for c in self.calls if c.startswith(prefix)]

    @property
    def log(self) -> str:
        path = self.root / "log" / "boot.log"
        return path.read_text() if path.exists() else ""


class FakeHost:
    """A temporary directory with fake commands, a fake torch and redirected paths."""

    def __init__(self, root: Path, *, omit: tuple[str, ...] = ()) -> None:
        self.root = root
        self.bin = root / "bin"
        self.state = root / "state-fakes"
        for d in (self.bin, self.state, root / "torch" / "torch"):
            d.mkdir(parents=True, exist_ok=True)
        for name, body in FAKES.items():
            if name in omit:
                continue
            path = self.bin / name
            path.write_text("#!/bin/bash\n" + body)
            path.chmod(path.stat().st_mode | stat.S_IXUSR)
        (root / "torch" / "torch" / "__init__.py").write_text(FAKE_TORCH)
        self.calls = root / "calls.log"
        self.calls.write_text("")

    def env(self, **overrides: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "FAKE_CALLS": str(self.calls),
            "FAKE_STATE": str(self.state),
            "FAKE_BIN": str(self.bin),
            "FAKE_INSTANCE_ID": INSTANCE_ID,
            "PYTHONPATH": str(self.root / "torch"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "TORCH_PYTHON": sys.executable,
        }
        env.update(overrides)
        return env

    def run(self, script: Path, env: dict[str, str]) -> Run:
        proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, cwd=self.root)
        calls = [line for line in self.calls.read_text().splitlines() if line]
        return Run(proc.returncode, proc.stdout + proc.stderr, calls, self.root, env)
