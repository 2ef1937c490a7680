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

APT_PACKAGES=(mininet iproute2 iputils-ping iperf3 ethtool bridge-utils clang llvm libbpf-dev libc6-dev git
              python3 python3-venv python3-pip python3-dev gcc make tshark)
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian/Ubuntu ship bpftool in different packages; it is optional (debugging only).
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing apt packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
    # Wait up to 10 min for a held apt lock: a fresh Ubuntu VM's first-boot
    # unattended-upgrades holds it for minutes while the provisioner runs.
    apt_wait=(-o DPkg::Lock::Timeout=600)
    $SUDO apt-get "${apt_wait[@]}" update -qq
    $SUDO apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${missing[@]}"
fi

stamp="$VENV/.fabricemu-installed"
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating virtual environment $VENV (system Python, system site packages)"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
    rm -f "$stamp"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing fabricemu and its Python dependencies into $VENV"
    # pip's and the build backend's notices go to a log, shown only if the install fails.
    log="$VENV/pip-install.log"
    if ! { "$VENV/bin/python" -m pip install -q --upgrade pip \
           && "$VENV/bin/python" -m pip install -q -e ".[test]"; } >"$log" 2>&1; then
        cat "$log" >&2
        echo "setup: installing into $VENV failed (log above, also in $log)" >&2
        exit 1
    fi
    touch "$stamp"
    # Write the new venv's few hundred MB out now: left to the kernel's flusher, the
    # write-back comes ~30 s later, in the middle of a first demo, and stalled one
    # (p99 pacing lag 3 ms, INVALID) in four fresh-clone runs.
    sync
fi
"$VENV/bin/python" -c "import mininet.topo, pyroute2, scapy, pandas" \
    || { echo "setup: the virtual environment cannot import its dependencies" >&2; exit 1; }
