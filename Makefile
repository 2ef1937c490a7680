# Conveniences over scripts/run (the README's commands); each installs what is missing.
# The venv scripts/run uses (FABRICEMU_VENV, the Vagrant VM's /etc/fabricemu/venv, or .venv).
VENV ?= $(shell bash -c 'source scripts/venv-path.sh && echo "$$VENV"')

.PHONY: demo test unit lint bench clean

demo:
	bash scripts/run demo

test:
	bash scripts/run test

unit:
	bash scripts/run test tests/unit

lint:
	bash scripts/setup.sh && $(VENV)/bin/ruff check emu topologies traffic experiments bench tests

bench:
	bash scripts/setup.sh && $(VENV)/bin/emu bench lifecycle

clean:
	-$(VENV)/bin/emu clean
