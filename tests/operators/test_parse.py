"""Reply parsing: a kernel from fenced blocks or from SEARCH/REPLACE edits, or a failure with its reason —
never an exception, whatever the reply."""
from __future__ import annotations

import pytest

from kevolve.operators import knobs
from kevolve.operators.parse import apply_edits, defines_entry, extract_kernel, parse_reply

KERNEL = """#include <cuda_runtime.h>
constexpr int THREADS = 256;  // knob: 128, 256, 512
__global__ void k(float* o) { o[threadIdx.x] = 0.f; }
extern "C" int forward(const float* x, float* out, int64_t N, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    k<<<1, THREADS, 0, stream>>>(out);
    return 0;
}
"""


def fenced(body: str, lang: str = "cuda") -> str:
    return f"```{lang}\n{body}```\n"


def test_one_fenced_kernel():
    p = parse_reply("Here it is.\n\n" + fenced(KERNEL) + "\nThis is faster.", "forward")
    assert p.source == KERNEL and p.form == "kernel" and p.failure is None


@pytest.mark.parametrize("lang", ["cuda", "cu", "cpp", "c++", "c", ""])
def test_kernel_languages(lang):
    assert parse_reply(fenced(KERNEL, lang), "forward").source == KERNEL


def test_several_blocks_the_last_that_defines_the_entry_point_wins():
    draft = KERNEL.replace("THREADS = 256", "THREADS = 128")
    helper = "__device__ float sq(float v) { return v * v; }\n"
    reply = ("First attempt:\n" + fenced(draft) + "Better:\n" + fenced(KERNEL) + "A helper:\n" + fenced(helper)
             + "Test it with:\n" + fenced("print(1)\n", "python"))
    assert parse_reply(reply, "forward").source == KERNEL


def test_a_declaration_is_not_a_definition():
    assert not defines_entry('extern "C" int forward(const float* x);', "forward")
    assert defines_entry('extern "C"\nint forward(const float* x,\n float* y) {\n return 0; }', "forward")
    p = parse_reply(fenced('extern "C" int forward(const float* x);\n'), "forward")
    assert p.source is None and "defines the entry point" in p.failure


@pytest.mark.parametrize("reply,why", [
    ("I would use shared memory and warp shuffles.", "no code block (text only)"),
    ("", "no code block (empty reply)"),
    (fenced("import torch\n", "python") + fenced('{"a": 1}\n', "json"), "not C/C++/CUDA (json, python)"),
    ("```cuda\n" + KERNEL[:120], "never closed"),
    (fenced(KERNEL.replace("forward", "backward")), "defines the entry point `extern \"C\" int forward"),
])
def test_replies_without_a_kernel_fail_with_a_reason(reply, why):
    p = parse_reply(reply, "forward")
    assert p.source is None and why in p.failure


def test_a_bare_source_file_is_accepted_but_bare_prose_is_not():
    assert parse_reply(KERNEL, "forward").source == KERNEL
    assert parse_reply("Sure! " + KERNEL, "forward").source is None


def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_edits_apply_in_order_and_keep_knob_lines():
    reply = ("Two changes:\n" + edit("    k<<<1, THREADS, 0, stream>>>(out);", "    k<<<2, THREADS, 0, stream>>>(out);")
             + "and\n" + fenced(edit("    return 0;\n}", "    return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}")))
    p = parse_reply(reply, "forward", parent=KERNEL)
    assert p.form == "edits" and p.edits == 2 and p.failure is None
    assert "k<<<2, THREADS" in p.source and "cudaGetLastError" in p.source
    assert "constexpr int THREADS = 256;  // knob: 128, 256, 512\n" in p.source
    assert knobs.parse(p.source)["THREADS"].choices == ("128", "256", "512")
    assert p.source.replace("k<<<2", "k<<<1").replace("    return cudaGetLastError() == cudaSuccess ? 0 : 1;",
                                                        "    return 0;") == KERNEL   # nothing else changed


def test_an_edit_can_see_the_edits_before_it():
    reply = edit("THREADS = 256", "THREADS = 512") + edit("THREADS = 512;", "THREADS = 1024;")
    assert "THREADS = 1024;" in apply_edits(KERNEL, reply).source


@pytest.mark.parametrize("reply,why", [
    (edit("THREADS = 64", "THREADS = 32"), "edit 1 of 1: the SEARCH text (starting `THREADS = 64`) does not occur"),
    (edit("THREADS = 256", "THREADS = 512") + edit("THREADS = 256", "THREADS = 1024"),
     "edit 2 of 2: the SEARCH text (starting `THREADS = 256`) does not occur in the kernel as the earlier edits"),
    (edit("stream", "s"), "occurs 2 times"),
    (edit("", "x"), "the SEARCH text is empty"),
    ("<<<<<<< SEARCH\nTHREADS\n=======\nX\n", "not closed with >>>>>>> REPLACE"),
    ("<<<<<<< SEARCH\nTHREADS\n>>>>>>> REPLACE\n", "REPLACE marker without its SEARCH and ======="),
])
def test_edits_that_do_not_apply_exactly_once_fail_with_a_reason(reply, why):
    p = parse_reply(reply, "forward", parent=KERNEL)
    assert p.source is None and p.form == "edits" and why in p.failure


def test_edits_without_a_parent_or_that_remove_the_entry_point_fail():
    assert "no parent" in parse_reply(edit("a", "b"), "forward").failure
    p = parse_reply(edit('extern "C" int forward(', 'int forward('), "forward", parent=KERNEL)
    assert p.source is None and "no longer defines" in p.failure


@pytest.mark.parametrize("reply", ["```", "```cuda\n```", "<<<<<<< SEARCH", "=======\n>>>>>>> REPLACE", "\x00" * 10,
                                   "```\n" * 7, "{" * 1000, "<<<<<<< SEARCH\n=======\n>>>>>>> REPLACE"])
def test_garbage_never_raises(reply):
    for parent in (None, KERNEL):
        p = parse_reply(reply, "forward", parent=parent)
        assert (p.source is None) == (p.failure is not None)


def test_extract_kernel_strips_to_one_trailing_newline():
    assert extract_kernel(fenced(KERNEL + "\n\n\n"), "forward").source == KERNEL
