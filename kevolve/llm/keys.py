"""API keys: read once at start from the environment, held in a `Secret` that never prints.

Guarantees: a provider chosen without its key stops at start with `LLMConfigError` naming the variable to set;
a Secret's str/repr is a mask, so a key cannot reach a log line, a repr, an exception or a cache row by accident;
`scrub` removes a key from text a service sent back (some services echo part or all of a rejected key).
Not guaranteed: anything about a key once it is handed to a client library's constructor (`reveal`), which is
the only place it is revealed.
"""
from __future__ import annotations

from typing import Mapping

from kevolve.llm.errors import LLMConfigError

# the variables each provider reads, in order of preference
KEY_VARS = {
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "local": ("LOCAL_LLM_API_KEY",),     # optional: a local server usually takes any key
}
LOCAL_DUMMY_KEY = "EMPTY"                # what vLLM's and Ollama's docs tell an OpenAI client to send


class Secret:
    """A credential. `reveal()` is the only way to the value; everything else prints a mask."""
    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """`text` with every occurrence of the key (and of its longer fragments) replaced by a mask."""
        v = self._value
        if not v or not text:
            return text
        text = text.replace(v, "***")
        if len(v) >= 16:    # a service may echo a truncated key, e.g. its first 20 characters
            for n in range(len(v) - 1, 11, -1):
                if v[:n] in text:
                    text = text.replace(v[:n], "***")
                if v[-n:] in text:
                    text = text.replace(v[-n:], "***")
        return text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("a Secret is not pickled: read keys where the call is made")


def resolve_key(provider: str, env: Mapping[str, str]) -> Secret:
    """The key for `provider` from `env`; raises LLMConfigError naming the variable when a needed key is absent."""
    names = KEY_VARS[provider]
    for name in names:
        value = (env.get(name) or "").strip()
        if value:
            return Secret(value)
    if provider == "local":
        return Secret(LOCAL_DUMMY_KEY)
    either = " or ".join(names)
    raise LLMConfigError(f"llm.provider={provider} needs an API key: set the environment variable {either} "
                         f"(or choose llm=local for an OpenAI-compatible server, or llm=none)")


def key_var(provider: str) -> str:
    """The variable a user should check when the service rejects the key."""
    return " or ".join(KEY_VARS[provider])

