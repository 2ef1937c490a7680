"""The Vagrantfile's choices, read by loading it in Ruby against a stub of Vagrant's
configuration API that records every setting: the box and synced folder per provider,
vCPUs, memory and the demo's S from the host's size, and a provisioner that fails
loudly. Also that every file a VM runs keeps LF line ends on any checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from core.scaling import DEFAULT_SCALE

ROOT = Path(__file__).resolve().parents[2]
VAGRANTFILE = ROOT / "Vagrantfile"
needs_ruby = pytest.mark.skipif(shutil.which("ruby") is None, reason="needs ruby")

# Records `config.a.b = x` as ["a.b=", [x], {}]; provider blocks record under
# "provider.NAME" and their override under "override.NAME".
RECORDER = r"""
require "json"
module Vagrant
  VERSION = ENV.fetch("STUB_VAGRANT_VERSION", "2.4.1")
  class Recorder
    def initialize(log, path) @log, @path = log, path end
    def respond_to_missing?(*) true end
    def method_missing(name, *args, **kw, &blk)
      path = @path + [name.to_s]
      if blk && name == :provider
        blk.call(Recorder.new(@log, ["provider", args[0].to_s]),
                 Recorder.new(@log, ["override", args[0].to_s]))
      elsif blk
        blk.call(Recorder.new(@log, path))
      else
        @log << [path.join("."), args, kw]
      end
      Recorder.new(@log, path)
    end
  end
  def self.configure(_version)
    log = []
    yield Recorder.new(log, [])
    puts JSON.generate(log)
  end
end
load ARGV[0]
"""


def _settings(**env: str) -> list[tuple[str, list, dict]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FABRICEMU_")}
    out = subprocess.run(["ruby", "-e", RECORDER, str(VAGRANTFILE)], capture_output=True,
                         text=True, env={**clean, **env}, timeout=30)
    assert out.returncode == 0, out.stderr
    return [tuple(item) for item in json.loads(out.stdout.splitlines()[-1])]


def _value(settings, key: str):
    values = [args[0] for k, args, _ in settings if k == key]
    assert len(values) == 1, (key, values)
    return values[0]


@needs_ruby
def test_the_vagrantfile_is_valid_ruby():
    out = subprocess.run(["ruby", "-c", str(VAGRANTFILE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@needs_ruby
def test_each_provider_gets_a_box_published_for_it_and_the_override_wins():
    s = _settings(FABRICEMU_CPUS="2")
    boxes = {k.split(".")[1]: args[0] for k, args, _ in s
             if k.startswith("override.") and k.endswith(".vm.box=")}
    # bento/ubuntu-24.04's recent versions have no VirtualBox build (chef/bento #1595,
    # #1663); cloud-image/ubuntu-24.04 is built for virtualbox and libvirt.
    assert boxes == {"virtualbox": "cloud-image/ubuntu-24.04",
                     "libvirt": "cloud-image/ubuntu-24.04",
                     "vmware_desktop": "bento/ubuntu-24.04",
                     "parallels": "bento/ubuntu-24.04"}
    s = _settings(FABRICEMU_CPUS="2", FABRICEMU_BOX="local/box")
    assert {args[0] for k, args, _ in s if k.endswith("vm.box=")} == {"local/box"}


@needs_ruby
def test_the_synced_folder_type_is_explicit_and_rsync_leaves_the_vm_s_files_alone():
    s = _settings(FABRICEMU_CPUS="2")
    folders = {k.split(".")[1]: kw for k, args, kw in s
               if k.endswith(".vm.synced_folder") and args == [".", "/fabricemu"]}
    assert {p: kw["type"] for p, kw in folders.items()} == {
        "virtualbox": "rsync", "libvirt": "virtiofs", "vmware_desktop": "vmware",
        "parallels": "parallels"}
    assert {".venv/", "runs/", ".vagrant/", "*.egg-info/"} <= set(
        folders["virtualbox"]["rsync__exclude"])
    assert all("rsync__exclude" not in kw for p, kw in folders.items() if p != "virtualbox")
    # virtiofs needs the guest's memory shared with the host's virtiofsd.
    assert ("provider.libvirt.memorybacking", ["access"], {"mode": "shared"}) in s
    s = _settings(FABRICEMU_CPUS="2", FABRICEMU_SYNC="rsync")
    assert {kw["type"] for k, args, kw in s if args == [".", "/fabricemu"]} == {"rsync"}


@needs_ruby
@pytest.mark.parametrize(("cpus", "scale"), [(2, 2 * DEFAULT_SCALE), (3, 2 * DEFAULT_SCALE),
                                             (4, DEFAULT_SCALE), (8, DEFAULT_SCALE)])
def test_the_demo_gets_the_s_its_vcpus_need(cpus, scale):
    s = _settings(FABRICEMU_CPUS=str(cpus))
    assert {args[0] for k, args, _ in s if k.endswith(".cpus=")} == {cpus}
    env = [kw["env"] for k, args, kw in s if k == "vm.provision"][0]
    assert env["FABRICEMU_DEMO_SCALE"] == str(int(scale))
    assert env["FABRICEMU_VCPUS"] == str(cpus)


@needs_ruby
def test_vcpus_and_memory_follow_the_host():
    s = _settings()
    cpus = {args[0] for k, args, _ in s if k.endswith(".cpus=")}
    host = len(os.sched_getaffinity(0))
    assert cpus == {min(8, max(2, host // 2))}
    memory = {args[0] for k, args, _ in s if k.endswith(".memory=")}
    host_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    assert len(memory) == 1 and abs(memory.pop() - min(8192, max(4096, host_mib // 4))) <= 1
    assert {args[0] for k, args, _ in _settings(FABRICEMU_MEMORY="5000")
            if k.endswith(".memory=")} == {5000}


@needs_ruby
def test_a_bad_count_is_one_line():
    out = subprocess.run(["ruby", "-e", RECORDER, str(VAGRANTFILE)], capture_output=True,
                         text=True, env={**os.environ, "FABRICEMU_CPUS": "four"})
    assert out.returncode != 0 and out.stderr.strip() == "FABRICEMU_CPUS=four: a whole number, please"


def _provision_in(tmp_path: Path, setup_status: int, **env: str) -> tuple[int, Path]:
    """Run the provisioner with its absolute paths moved under tmp_path (it writes
    /etc/fabricemu and /usr/local/bin on a VM) and a stand-in set-up exiting setup_status."""
    kw = [kw for k, args, kw in _settings(FABRICEMU_CPUS="2") if k == "vm.provision"][0]
    absolute = r"(?<=\s)/(etc|fabricemu|opt|usr)\b"
    script = re.sub(absolute, f"{tmp_path}/\\1", kw["inline"])
    assert not re.search(absolute, script) and "/etc/" in script
    (tmp_path / "fabricemu" / "scripts").mkdir(parents=True)
    (tmp_path / "fabricemu" / "scripts" / "setup.sh").write_text(f"exit {setup_status}\n")
    (tmp_path / "usr" / "local" / "bin").mkdir(parents=True)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10,
                         env={"PATH": os.environ["PATH"], **kw["env"], **env})
    return out.returncode, tmp_path / "etc" / "fabricemu"


@needs_ruby
def test_the_provisioner_stops_at_its_first_failing_step(tmp_path):
    kw = [kw for k, args, kw in _settings(FABRICEMU_CPUS="2") if k == "vm.provision"][0]
    assert kw["inline"].startswith("#!/bin/bash\nset -euo pipefail")
    status, etc = _provision_in(tmp_path / "ok", 0)
    assert status == 0 and (etc / "demo-scale").read_text() == f"{2 * DEFAULT_SCALE:g} 2\n"
    # A failing set-up fails the provisioning with its status.
    status, etc = _provision_in(tmp_path / "setup", 2)
    assert status == 2
    # The maintainers' switch (scripts/vagrant-check) fails it before anything is written.
    status, etc = _provision_in(tmp_path / "first", 0, FABRICEMU_PROVISION_FAIL="1")
    assert status == 1 and not etc.exists()


def test_everything_a_vm_runs_keeps_lf_line_ends_on_every_checkout():
    paths = ["Vagrantfile", "scripts/setup.sh", "scripts/run", "scripts/venv-path.sh",
             "scripts/vagrant-check", "pyproject.toml"]
    out = subprocess.run(["git", "check-attr", "eol", "--", *paths], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [f"{p}: eol: lf" for p in paths]
