"""The LLM operators' prompts: what every prompt must show (task, exact signature, target, bench sizes, rules,
knob syntax), what none may show (a held-out configuration), and the template renderer's strictness."""
from __future__ import annotations

import re

import pytest

from conftest import H200, judged
from kevolve.judge.static import rules
from kevolve.messages import Candidate, Proposal
from kevolve.operators import context as facts
from kevolve.operators import template, verifiers
from kevolve.operators.compose import OPERATORS, Request, messages
from kevolve.operators.context import Context
from kevolve.operators.strategies import Strategy
from kevolve.task.abi import c_prototype
from kevolve.config.tasks import list_tasks
from kevolve.task.load import load_task
from kevolve.task.spec import show_scalar

TORCH_SRC = "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor x) { return x; }\n"


def requests(task, parent: Candidate, shape_set: str = "bench", fail_heldout: bool = True) -> dict[str, Request]:
    """One request per prompt kind, with numbers and feedback that mention held-out configurations."""
    other = Candidate(id="other", source=parent.source.replace("forward", "forward", 1) + "// variant\n")
    ev = judged(task, shape_set, fail_heldout=fail_heldout)
    evals = {parent.id: ev, other.id: judged(task, shape_set)}
    p = Proposal(0, parent, "optimize", (other,))
    good = ((Strategy("vector loads", "read x as float4"), 0.7, 3),)
    return {
        "translate": Request("translate"),
        "translate_torch": Request("translate", torch_source=TORCH_SRC),
        "optimize": Request("optimize", p, evals, feedback=ev.failure or "", strategies=good, profile="dram 61%"),
        "crossover": Request("crossover", p, evals),
        "repair": Request("repair", p, evals, feedback=ev.failure or ""),
        "meta": Request("meta", p, evals, feedback=ev.failure or "", strategies=good, count=3),
        "meta_child": Request("meta", p, evals, strategy=Strategy("split rows", "cut each row into tiles")),
        "red_team": Request("red_team", p),
    }


def all_prompts(ctx: Context, parent: Candidate) -> dict[str, str]:
    out = {k: "\n".join(m["content"] for m in messages(ctx, r)) for k, r in requests(ctx.task, parent,
                                                                                     ctx.shape_set).items()}
    for v in verifiers.VERIFIERS:
        out[f"verify_{v}"] = "\n".join(m["content"] for m in verifiers.messages(ctx, v, parent.source))
    return out


def test_every_operator_has_a_prompt(ctx, parent):
    assert set(OPERATORS) <= {k.split("_child")[0].replace("_torch", "") for k in requests(ctx.task, parent)}


@pytest.mark.parametrize("kind", ["translate", "translate_torch", "optimize", "crossover", "repair", "meta",
                                  "meta_child", "red_team", "verify_compile", "verify_memory", "verify_numerics"])
def test_prompt_shows_task_signature_target_bench_sizes_and_rules(ctx, parent, kind):
    text = all_prompts(ctx, parent)[kind]
    assert c_prototype(ctx.task, "cuda") in text                       # the exact signature
    assert H200 in text and "cudaStream_t stream" in text
    assert "mean = sum(x[b, :]) / N" in text                           # the task's prompt.md
    for c in ctx.shown():                                              # every bench configuration
        assert c.shape_id in text and f"N={c.size_dict['N']}" in text
    if not kind.startswith("verify"):
        assert "// knob:" in text and "range(start, stop, *factor)" in text
        assert "filled with NaN" in text and "unchanged" in text and "odd" in text and "workspace" in text
        for name, (reason, _, _) in rules.VOCABULARY.items():          # what the static rules refuse
            assert f"- {name}: {reason}" in text
    else:
        assert '{"verdict": "pass" or "fail"' in text and "need not validate its arguments" in text


@pytest.mark.parametrize("name", list_tasks())
@pytest.mark.parametrize("target,shape_set", [("cuda", "bench"), ("cpu", "small")])
def test_no_heldout_configuration_appears_in_any_prompt(name, target, shape_set):
    """Held-out labels, and held-out sizes that no text written without them (our templates, the task's prompt.md,
    the parent kernel) happens to contain, appear in no prompt — though the numbers and the feedback name them."""
    task = load_task(name)
    ctx = Context(task, target, H200 if target == "cuda" else "AMD EPYC, 2 cores", shape_set)
    parent = Candidate(id="parent", source=task.seed_path(target).read_text())
    shown = {v for c in ctx.shown() for _, v in c.sizes}
    public = task.prompt() + parent.source + "".join(p.read_text() for p in template.PROMPTS.rglob("*.md"))
    secret = {v for c in ctx.heldout() for _, v in c.sizes if v >= 100 and not re.search(rf"(?<!\d){v}(?!\d)",
                                                                                          public)} - shown
    labels = {c.shape_id for c in ctx.heldout()} | {",".join(f"{k}={v}" for k, v in c.sizes) for c in ctx.heldout()}
    labels |= {c.label for c in ctx.heldout() if c.label}
    scalars = _set_scalars(ctx.heldout()) - _set_scalars(ctx.shown())     # eps=0.01 of held-out ones only
    assert secret and labels
    for kind, text in all_prompts(ctx, parent).items():
        for label in labels | scalars:
            assert label not in text, (kind, label)
        for v in secret:
            assert not re.search(rf"(?<![\w.]){v}(?![\w.])", text), (kind, v)


def _set_scalars(cases) -> set[str]:
    return {f"{k}={show_scalar(v)}" for c in cases for k, v in c.scalars if k in c.custom}


def test_configurations_show_each_shown_configurations_scalars():
    ctx = Context(load_task("rmsnorm_fwd"), "cuda", H200, "bench")
    table = facts.configurations(ctx)
    assert "| configuration | sizes | scalars | initialisations | fewest bytes moved |" in table
    assert "| BT=16384,(4096,),eps=1e-08 | B=16384, N=4096 | eps=1e-08 | random, identity, tiny, offset |" in table
    assert "| BT=4096,(4096,) | B=4096, N=4096 | eps=1e-06 |" in table           # the default, shown too
    hidden = _set_scalars(ctx.heldout()) - _set_scalars(ctx.shown())
    assert hidden and not any(h in table for h in hidden)


def test_configurations_say_what_each_shown_initialisation_draws():
    ctx = Context(load_task("layernorm_fwd"), "cuda", H200, "bench")
    table = facts.configurations(ctx)
    assert "- offset: x ~ normal(60, 1), weight ~ normal, bias ~ normal" in table     # |mean| >> std: plan for it
    assert "- offset_mild: x ~ normal(15, 1)" in table and "- identity: x ~ normal(1, 2), weight ~ ones" in table
    shown = {c.init for c in ctx.shown()}
    assert not [line for line in table.splitlines() if line.startswith("- ") and line[2:].split(":")[0] not in shown]


def test_optimize_shows_shown_numbers_and_redacted_feedback(ctx, parent, task):
    r = requests(task, parent)["optimize"]
    text = messages(ctx, r)[1]["content"]
    assert "| B=8,(64,256,256)/tiny/s0 | ok |" in text                # per-configuration numbers
    assert "kernel ms | eager ms | compile ms | speedup | of memory floor" in text
    assert "a held-out configuration" in text                          # the failure, redacted
    rows = [line for line in text.splitlines() if re.match(r"\| \S+/\w+/s\d+ \|", line)]
    assert len(rows) == len(ctx.shown()) and "| a held-out configuration |" not in text   # only shown rows
    assert "dram 61%" in text and "vector loads" in text and "### Kernel 1" in text
    assert "<<<<<<< SEARCH" in text                                    # edit blocks are allowed here


def test_meta_child_prompt_is_the_strategy_without_other_strategies(ctx, parent, task):
    text = messages(ctx, requests(task, parent)["meta_child"])[1]["content"]
    assert "**split rows**: cut each row into tiles" in text
    assert "Strategies that worked" not in text and "Other kernels" not in text


def test_translate_needs_no_parent_and_shows_the_reference(ctx):
    text = messages(ctx, Request("translate"))[1]["content"]
    assert "def reference(x, weight, bias, *, B, N, eps)" in text and "<<<<<<< SEARCH" not in text


def test_cpu_prompt_names_g_plus_plus_and_no_stream(task):
    ctx = Context(task, "cpu", "AMD EPYC 9654, 2 cores", "small")
    text = messages(ctx, Request("translate"))[0]["content"]
    assert "g++ -O3 -march=native -fopenmp" in text and "cudaStream_t" not in text
    assert "inline-assembly" in text and "cuda_runtime.h" not in text


def test_requests_are_checked():
    with pytest.raises(ValueError, match="expected one of"):
        Request("summon")
    with pytest.raises(ValueError, match="needs a proposal"):
        Request("optimize")
    with pytest.raises(ValueError, match="second parent"):
        Request("crossover", Proposal(0, Candidate(id="p", source="x"), "crossover"))


def test_redact_rewrites_heldout_mentions_only(ctx):
    held = ctx.heldout()[-1]
    text = (f"{held.id}: output out: 7 of 300009 elements outside tolerance; worst at (2, 100002)\n"
            f"compile error at line 1000: expected ';'")
    out = facts.redact(ctx, text)
    assert held.shape_id not in out and "300009" not in out and "100002" not in out and "(…)" in out
    assert out.splitlines()[1] == "compile error at line 1000: expected ';'"   # other lines verbatim


def test_redact_drops_the_correctness_inputs_salt(ctx):
    """A verdict names its inputs' variant and salt for a person (KEVOLVE_INPUT_SALT reproduces it); no prompt does."""
    text = ("B=2,N=4096/random/s0: output out: 8190 of 8192 elements outside tolerance (first call, inputs "
            "4398046511104 of salt 4398046511104)\nB=2,N=4096/random/s0: crash: SIGSEGV (call 3, inputs 4398046511106 "
            "of salt 4398046511104)")
    out = facts.redact(ctx, text)
    assert "salt" not in out and "4398046511104" not in out, out
    assert "(first call)" in out and "(call 3)" in out, out


def test_template_renderer_is_strict_and_does_not_expand_values():
    assert template.render("parts/feedback", feedback="{{feedback}}").count("{{feedback}}") == 1
    with pytest.raises(KeyError, match="missing values"):
        template.render("parts/feedback")
    with pytest.raises(KeyError, match="unused values"):
        template.render("parts/feedback", feedback="x", extra="y")
    with pytest.raises(KeyError, match="no prompt template"):
        template.render("nonexistent")


def test_every_template_file_is_used(ctx, parent, task, monkeypatch):
    used = set()
    real = template.render

    def spy(name, /, **values):
        used.add(name)
        return real(name, **values)
    monkeypatch.setattr("kevolve.operators.compose.render", spy)
    monkeypatch.setattr("kevolve.operators.verifiers.render", spy)
    all_prompts(ctx, parent)
    files = {str(p.relative_to(template.PROMPTS).with_suffix("")) for p in template.PROMPTS.rglob("*.md")}
    assert files == used


def test_translate_founders_alternate_the_reference_and_the_torch_extension_seeds(ctx, task):
    """A run's translate founders: the torch reference, then the task's torch-extension kernel (layernorm_fwd's
    torch_cuda.cu), in turn; the second one's prompt quotes that kernel to translate into the C ABI."""
    from kevolve.search.requests import founders
    torch_seed = task.seed_path("cuda", "torch").read_text()
    assert founders(task, "cuda", 4) == [None, torch_seed, None, torch_seed]
    assert founders(task, "cpu", 3) == [None, None, None]                 # no torch-extension seed for the CPU
    text = messages(ctx, Request("translate", torch_source=founders(task, "cuda", 2)[1]))[1]["content"]
    assert torch_seed.rstrip() in text and "torch-extension" in text.lower()


def test_a_failure_on_a_drawn_configuration_reaches_repair_with_its_sizes_and_scalars(ctx, parent, task):
    """A drawn configuration is no held-out one: the repair prompt shows where the kernel failed (sizes, eps, init),
    without the input salt a person would reproduce it with (issue 46, item 4)."""
    import dataclasses
    failure = ("drawn:B=1,N=263345,eps=0.05/tiny/s1651660647 (a configuration drawn from the task's domain; shrunk "
               "from drawn:B=1,N=2030592,eps=0.05/tiny/s1651660647 in 15 checks): output out: 52 of 263345 elements "
               "outside tolerance (atol=0.0001, rtol=0.0001); worst at (0, 101595): got 0.00755961, expected 0.00771 "
               "(first call, inputs 5108813420754 of salt 5108813420754)")
    ev = dataclasses.replace(judged(task), correct=False, stage="correctness", failure=failure)
    p = Proposal(0, parent, "repair")
    text = messages(ctx, Request("repair", p, {parent.id: ev}, feedback=failure))[1]["content"]
    assert "drawn:B=1,N=263345,eps=0.05/tiny" in text and "a configuration drawn from the task's domain" in text
    assert "of salt" not in text
