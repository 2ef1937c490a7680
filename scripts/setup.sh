#!/usr/bin/env bash
# Idempotent set-up for Debian 12 / Ubuntu 24.04: apt packages, then a virtual
# environment made from the *system* Python with system site packages, so that
# apt's Mininet (python3-mininet + mnexec) is importable. Safe to run again.
set -euo pipefail
ROOT_DIR="$(dirname -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")")"
cd "$ROOT_DIR"
source "$ROOT_DIR/scripts/venv-path.sh"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "setup: needs root (or sudo) to install packages and build namespaces" >&2; exit 1
    fi
fi

# One line per step on the terminal; apt's and pip's output goes to a log, whose end
# is shown if a step fails.
mkdir -p "$VENV"
LOG="$VENV/setup.log"
: >"$LOG"
# A step's command runs as a condition, where set -e is off: chain its parts with &&.
step() {  # step "what" command...
    local what="$1"; shift
    echo "setup: $what"
    if ! "$@" >>"$LOG" 2>&1; then
        echo "setup: failed: $what; the end of $LOG:" >&2
        tail -n 25 "$LOG" >&2
        exit 1
    fi
}

APT_PACKAGES=(mininet iproute2 iputils-ping iperf3 ethtool bridge-utils clang llvm libbpf-dev libc6-dev git
              python3 python3-venv python3-pip python3-dev gcc make tshark prometheus)
# One dpkg-query for all of them (one per package cost 0.4 s of every run). It exits 1
# when any of them is unknown to dpkg, which set -e and pipefail must not take for a
# failure: a fresh machine is exactly where some are.
installed=" $({ dpkg-query -W -f='${Package} ${Status}\n' "${APT_PACKAGES[@]}" 2>/dev/null || true; } \
              | awk '/ install ok installed$/ {printf "%s ", $1}')"
missing=()
for p in "${APT_PACKAGES[@]}"; do
    case "$installed" in *" $p "*) ;; *) missing+=("$p") ;; esac
done
# Debian/Ubuntu ship bpftool in different packages; it is optional (debugging only).
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
    # Wait up to 10 min for a held apt lock: a fresh Ubuntu VM's first-boot
    # unattended-upgrades holds it for minutes while the provisioner runs.
    local apt_wait=(-o DPkg::Lock::Timeout=600)
    $SUDO apt-get "${apt_wait[@]}" update -qq \
        && $SUDO apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${missing[@]}"
}
if [ ${#missing[@]} -gt 0 ]; then
    step "installing apt packages: ${missing[*]}" apt_install
fi

stamp="$VENV/.fabricemu-installed"
if [ ! -x "$VENV/bin/python" ]; then
    step "creating virtual environment $VENV (system Python, system site packages)" \
        /usr/bin/python3 -m venv --system-site-packages "$VENV"
    rm -f "$stamp"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    pip_install() {
        "$VENV/bin/python" -m pip install --upgrade pip \
            && "$VENV/bin/python" -m pip install -e ".[test]" \
            && "$VENV/bin/python" -c "import mininet.topo, pyroute2, scapy, pandas"
    }
    step "installing fabricemu and its Python dependencies into $VENV (about a minute)" \
        pip_install
    touch "$stamp"
    # Write the new venv's few hundred MB out now: left to the kernel's flusher, the
    # write-back comes ~30 s later, in the middle of a first demo, and stalled one
    # (p99 pacing lag 3 ms, INVALID) in four fresh-clone runs.
    sync
fi
# Whether the venv sees its dependencies (apt's Mininet through the system site
# packages, the pip ones), by finding them: importing scapy and pandas took 1.1 s of
# every run. They are imported once, right after they are installed (pip_install).
"$VENV/bin/python" -c "import sys, importlib.util as u
sys.exit(any(u.find_spec(m) is None for m in ('mininet', 'pyroute2', 'scapy', 'pandas')))" \
    || { echo "setup: the virtual environment cannot import its dependencies" >&2; exit 1; }
