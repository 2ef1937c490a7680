# Sourced by setup.sh and run: where the virtual environment lives.
# FABRICEMU_VENV wins; else /etc/fabricemu/venv (written by the Vagrant provisioner,
# so the venv stays out of the folder shared with the host); else ./.venv.
if [ -z "${FABRICEMU_VENV:-}" ] && [ -r /etc/fabricemu/venv ]; then
    FABRICEMU_VENV="$(cat /etc/fabricemu/venv)"
fi
VENV="${FABRICEMU_VENV:-$(pwd)/.venv}"
