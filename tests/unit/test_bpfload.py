"""emu.bpfload.load_object: loads run with libbpf's log silent (its debug lines would
each take the GIL from the fabric's builder); a load the kernel refuses runs again
with the log captured, so the error still quotes the verifier. Needs root, clang and
a kernel that loads BPF; skips otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import CapabilityError
from emu import bpfload
from emu.cbuild import compile_c

#: Reads the packet without the bounds check the verifier insists on.
_REFUSED = r"""
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#define SEC(name) __attribute__((section(name), used))
SEC("tc") int unchecked(struct __sk_buff *skb)
{
    unsigned char *data = (unsigned char *)(long)skb->data;
    return data[64] ? TC_ACT_OK : TC_ACT_SHOT;
}
char LICENSE[] SEC("license") = "GPL";
"""


#: What the verifier accepts.
_ACCEPTED = r"""
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#define SEC(name) __attribute__((section(name), used))
SEC("tc") int accepted(struct __sk_buff *skb) { return TC_ACT_OK; }
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture
def objects(tmp_path: Path) -> dict[str, Path]:
    if os.geteuid() != 0:
        pytest.skip("loading eBPF programs needs root")
    built = {}
    for name, text in (("refused", _REFUSED), ("accepted", _ACCEPTED)):
        src = tmp_path / f"{name}.c"
        src.write_text(text)
        try:
            built[name] = compile_c(src, "bpf", what="a test program", out_dir=tmp_path / "out")
        except CapabilityError as e:
            pytest.skip(f"no BPF compiler here: {e}")
    return built


@pytest.fixture
def hook_calls():
    """Every call libbpf makes to the loader's print hook, by level."""
    lib = bpfload.libbpf()
    calls: list[int] = []
    own = lib.printer

    def counted(level: int, fmt: bytes, args: int) -> int:
        calls.append(level)
        return lib._print(level, fmt, args)
    lib.printer = bpfload._PRINT_FN(counted)
    lib.lib.libbpf_set_print(lib.printer)
    try:
        yield calls
    finally:
        lib.printer = own
        lib.lib.libbpf_set_print(own)


def test_a_load_is_silent_and_a_refused_one_quotes_the_verifier(objects, hook_calls):
    fds = bpfload.load_object(objects["accepted"], "accepted", what="the test program")
    for fd in fds:
        os.close(fd)
    assert hook_calls == []
    with pytest.raises(CapabilityError, match="the kernel refused the test program") as err:
        bpfload.load_object(objects["refused"], "unchecked", what="the test program")
    # The verifier's own words, from the load run again with the log captured.
    assert hook_calls and "invalid access to packet" in str(err.value)
    hook_calls.clear()
    fds = bpfload.load_object(objects["accepted"], "accepted", what="the test program")
    for fd in fds:
        os.close(fd)
    assert hook_calls == []   # silent again after the refusal
