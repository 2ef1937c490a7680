# Sourced by setup.sh and run: where the virtual environment lives, as an absolute path.
# FABRICEMU_VENV wins; else /etc/fabricemu/venv (written by the Vagrant provisioner,
# so the venv stays out of the folder shared with the host); else <repository>/.venv.
if [ -z "${FABRICEMU_VENV:-}" ] && [ -r /etc/fabricemu/venv ]; then
    FABRICEMU_VENV="$(cat /etc/fabricemu/venv)"
fi
VENV="$(readlink -m -- "${FABRICEMU_VENV:-$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/../.venv}")"
