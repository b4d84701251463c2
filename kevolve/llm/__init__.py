"""The LLM provider layer: the only code in kevolve that touches the network.

Use it as:

    from kevolve.llm import make_provider, Pool
    llm = make_provider(cfg.llm, run_dir=run_dir)     # stops here if a key is missing (names the variable)
    with Pool(llm) as pool:
        future = pool.submit([{"role": "user", "content": prompt}], seed=42)
        reply = future.result()                       # Reply: text, tokens, cost_usd, seconds, cached, params

Providers: `openai` (Chat Completions, OPENAI_API_KEY, base_url / OPENAI_BASE_URL), `gemini` (google-genai with
GEMINI_API_KEY or GOOGLE_API_KEY, or Vertex AI), `local` (any OpenAI-compatible server), `none`; several models
with weights, even from different providers, form one ensemble (kevolve/llm/config.py).

Guaranteed: a call is determined by (config, messages, seed) — the model, temperature and effort are drawn from
random.Random(seed) — and is kept in the run's response cache, so `llm.replay=RUN_DIR` reproduces a run without a
network; transient failures (429, 5xx, timeouts, dropped connections) are retried with back-off and jitter,
honouring Retry-After, and each endpoint has a concurrency limit; a call that fails for good raises `LLMError`
(`retryable`, `status`, `attempts`); costs come from the token counts the service reported and
kevolve/llm/prices.yaml; no API key appears in a repr, a log line of ours, an exception, a cache row or a Reply.
Not guaranteed: that a reply contains a usable kernel (the operators parse and judge that), that our cost equals
the provider's bill (no discounts for provider-side prompt caching), or the same reply from a live service twice.
No Ray and no torch are imported here.
"""
from kevolve.llm.config import LLMConfig, ModelSpec, Price, VertexConfig, validate
from kevolve.llm.ensemble import Disabled, Ensemble
from kevolve.llm.errors import LLMConfigError, LLMError, ReplayMiss
from kevolve.llm.factory import make_provider
from kevolve.llm.messages import Message, Reply, Sampling
from kevolve.llm.pool import Pool

__all__ = ["LLMConfig", "ModelSpec", "Price", "VertexConfig", "validate", "make_provider", "Pool", "Ensemble",
           "Disabled", "Message", "Reply", "Sampling", "LLMError", "LLMConfigError", "ReplayMiss"]
