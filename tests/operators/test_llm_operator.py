"""LLM operators end to end: `apply` (a reply → a Mutation, pure) and `LLMOperator` against the loopback OpenAI
server of tests/llm driven by the real `openai` client — a good kernel, a reply without code, edit blocks that
do and do not apply, a 429 then success, a permanent error, meta-generation — never an exception, costs from the
token counts the server reported."""
from __future__ import annotations

import json
import re

import pytest

from conftest import judged
from kevolve.llm import LLMConfigError, Reply, make_provider
from kevolve.llm.ensemble import Disabled
from kevolve.messages import Candidate, Proposal
from kevolve.operators import knobs
from kevolve.operators.compose import Request
from kevolve.operators.llm_operator import LLMOperator, apply
from kevolve.operators.strategies import Strategy
from llm_servers import ENV, Ok, Status, openai_config

GPT41 = (2.0, 8.0)      # kevolve/llm/prices.yaml: USD per million tokens in, out


def cost(tokens_in: int, tokens_out: int, price=GPT41) -> float:
    return (tokens_in * price[0] + tokens_out * price[1]) / 1e6


def fenced(source: str) -> str:
    return f"Here is the kernel.\n\n```cuda\n{source}```\nIt should be faster."


def edit(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


@pytest.fixture
def child(parent):
    return parent.source.replace("constexpr int THREADS = 256;", "constexpr int THREADS = 512;")


@pytest.fixture
def optimize(task, parent):
    other = Candidate(id="other", source=parent.source + "// other\n")
    return Request("optimize", Proposal(0, parent, "optimize", (other,)), {parent.id: judged(task)})


# ---- apply: pure

def test_apply_a_whole_kernel(ctx, optimize, child):
    m = apply(ctx, optimize, fenced(child))
    assert m.source == child and m.failure is None
    assert m.meta == {"operator": "optimize", "form": "kernel", "edits": 0, "knobs": 1}


def test_apply_edits_keeps_knob_lines(ctx, optimize, parent):
    m = apply(ctx, optimize, edit("    if (B == 0) return 0;", "    if (B <= 0) return 0;"))
    assert m.meta["form"] == "edits" and m.meta["edits"] == 1 and "if (B <= 0) return 0;" in m.source
    assert knobs.parse(m.source) == knobs.parse(parent.source)


@pytest.mark.parametrize("reply,why", [
    ("Use warp shuffles and vector loads.", "optimize: the reply contains no code block (text only)"),
    (edit("if (B == 1) return 0;", "x"), "optimize: edit 1 of 1: the SEARCH text (starting `if (B == 1)"),
    (edit("__syncthreads();", "x"), "occurs 3 times"),
    ("unchanged", "optimize: the reply's kernel is the parent unchanged"),
])
def test_apply_failures_are_mutations_with_reasons(ctx, optimize, parent, reply, why):
    if reply == "unchanged":
        reply = fenced(parent.source)
    m = apply(ctx, optimize, reply)
    assert m.source is None and why in m.failure


def test_a_cut_off_reply_says_so_and_keeps_its_cost(ctx, optimize, child):
    r = Reply(text="```cuda\n" + child[:200], model="gpt-4.1", provider="openai", tokens_in=10, tokens_out=20,
              cost_usd=0.5, seconds=3.0, finish_reason="length")
    m = apply(ctx, optimize, r)
    assert m.source is None and "never closed" in m.failure and "output token limit" in m.failure
    assert (m.cost_usd, m.model, m.seconds, m.meta["tokens_out"]) == (0.5, "gpt-4.1", 3.0, 20)


def test_a_rewrite_that_drops_knob_markers_gets_them_back(ctx, optimize, parent, child):
    """Knob mutation keeps working on an LLM child whose whole-kernel reply stripped the comments."""
    stripped = re.sub(r"[ \t]*// knob:.*", "", child)
    assert "// knob:" not in stripped and stripped != child
    m = apply(ctx, optimize, fenced(stripped))
    assert m.meta["knobs_restored"] == ["THREADS"] and m.meta["knobs"] == 1
    assert knobs.parse(m.source)["THREADS"].value == "512"
    assert knobs.parse(m.source)["THREADS"].choices == knobs.parse(parent.source)["THREADS"].choices
    bare = apply(ctx, optimize, fenced(re.sub(r"[ \t]*// knob:.*", "", parent.source)))    # the parent, unmarked
    assert knobs.parse(bare.source) == knobs.parse(parent.source) and bare.meta["knobs_restored"] == ["THREADS"]


def test_a_malformed_knob_line_is_recorded_not_fatal(ctx, optimize, child):
    bad = child.replace("// knob: 128, 256, 512, 1024", "// knob: 128 256 512")
    m = apply(ctx, optimize, fenced(bad))
    assert m.source == bad and "commas" in m.meta["knob_error"]


def test_meta_records_crossover_strategy_red_team_and_translate_from_torch(ctx, optimize, child, task):
    p = optimize.proposal
    assert apply(ctx, Request("crossover", p), fenced(child)).meta["second_parent"] == "other"
    m = apply(ctx, Request("meta", p, strategy=Strategy("split rows", "tiles")), fenced(child))
    assert (m.meta["strategy"], m.meta["idea"]) == ("split rows", "tiles")
    assert apply(ctx, Request("red_team"), fenced(child)).meta["red_team"] is True
    m = apply(ctx, Request("translate", torch_source="torch"), edit("a", "b"))
    assert m.meta["from"] == "torch-extension" and "no parent kernel" in m.failure


# ---- LLMOperator against the loopback server, real openai client

def operator(server, ctx, sleeps, *models, workers=None):
    llm = make_provider(openai_config(server, *models), env=ENV, sleep=sleeps)
    return LLMOperator(llm, ctx, workers=workers)


def test_end_to_end_scripted_replies(server, sleeps, ctx, optimize, child, parent):
    server.then(Ok(fenced(child), tokens_in=5000, tokens_out=1200),
                Ok("I would restructure the reduction.", tokens_in=5000, tokens_out=300),
                Ok(edit("    if (B == 0) return 0;", "    if (B <= 0) return 0;"), tokens_in=5000, tokens_out=100),
                Ok(edit("    if (B == 7) return 0;", "    return 1;"), tokens_in=5000, tokens_out=90),
                Status(429, "rate limited", {"Retry-After": "2"}), Ok(fenced(child), tokens_in=4000, tokens_out=800))
    op = operator(server, ctx, sleeps)
    good, text_only, edited, stale, after_429 = [op.run(optimize, seed=s) for s in range(5)]

    assert good.source == child and good.model == "gpt-4.1" and good.cost_usd == pytest.approx(cost(5000, 1200))
    assert good.meta["seed"] == 0 and good.meta["tokens_in"] == 5000 and good.meta["cached"] is False
    assert text_only.source is None and "no code block" in text_only.failure
    assert text_only.cost_usd == pytest.approx(cost(5000, 300))            # a failed reply still costs
    assert edited.meta["form"] == "edits" and "if (B <= 0) return 0;" in edited.source
    assert stale.source is None and "does not occur" in stale.failure
    assert after_429.source == child and sleeps == [pytest.approx(2.0)]     # the service's Retry-After
    assert after_429.cost_usd == pytest.approx(cost(4000, 800))

    body = server.requests[0].body                                          # what the model was sent
    system, user = body["messages"]
    assert system["role"] == "system" and "extern \"C\" int forward(const float* x" in system["content"]
    assert "## The current kernel" in user["content"] and parent.source.rstrip() in user["content"]
    assert "| B=8,(64,256,256)/random/s0 | ok |" in user["content"] and "B=8192" not in user["content"]


def test_a_call_that_fails_for_good_is_a_failed_mutation(server, sleeps, ctx, optimize):
    server.then(Status(400, "context length exceeded"))
    m = operator(server, ctx, sleeps).run(optimize, seed=1)
    assert m.source is None and m.failure.startswith("optimize: LLM call failed") and "400" in m.failure
    assert m.cost_usd == 0 and m.meta["operator"] == "optimize"


def test_a_chosen_model_is_the_one_called(server, sleeps, ctx, optimize, child):
    server.then(Ok(fenced(child)))
    m = operator(server, ctx, sleeps, "gpt-4.1", "gpt-4.1-mini").run(optimize, seed=3, model="gpt-4.1-mini")
    assert server.requests[0].body["model"] == "gpt-4.1-mini" and m.model == "gpt-4.1-mini"


def test_meta_generation_one_child_per_strategy(server, sleeps, ctx, optimize, child):
    strategies = [{"name": "split rows", "idea": "Cut rows into tiles."}, {"name": "float4", "idea": "Vector loads."}]
    server.then(Ok("Two ideas.\n```json\n" + json.dumps(strategies) + "\n```", tokens_in=3000, tokens_out=400),
                Ok(fenced(child), tokens_in=5000, tokens_out=1000),
                Ok(fenced(child.replace("THREADS = 512", "THREADS = 1024")), tokens_in=5000, tokens_out=1000))
    meta = Request("meta", optimize.proposal, optimize.evaluations, count=2)
    op = operator(server, ctx, sleeps, workers=1)
    children = op.meta(meta, seed=10)
    op.close()
    assert [c.meta["strategy"] for c in children] == ["split rows", "float4"]
    assert all(c.source and c.meta["operator"] == "meta" for c in children)
    assert [c.meta["seed"] for c in children] == [11, 12]
    share = cost(3000, 400) / 2
    assert all(c.cost_usd == pytest.approx(cost(5000, 1000) + share) for c in children)
    prompts = [r.body["messages"][1]["content"] for r in server.requests]
    assert "Propose 2 distinct strategies" in prompts[0]
    assert "**split rows**: Cut rows into tiles." in prompts[1] and "**float4**: Vector loads." in prompts[2]


def test_meta_with_a_malformed_list_is_one_failure(server, sleeps, ctx, optimize):
    server.then(Ok("Just make it faster.", tokens_in=100, tokens_out=10))
    (m,) = operator(server, ctx, sleeps).meta(Request("meta", optimize.proposal, count=3), seed=0)
    assert m.source is None and m.failure.startswith("meta: the reply holds no JSON list")
    assert m.cost_usd == pytest.approx(cost(100, 10)) and len(server.requests) == 1


def test_llm_off_is_the_runs_configuration_not_a_candidates_failure(ctx, optimize):
    with pytest.raises(LLMConfigError, match="llm.provider is none"):
        LLMOperator(Disabled(), ctx).run(optimize, seed=0)
