"""The chat endpoint of the LLM proposer: one OpenAI-compatible chat completion per call.

Owns: `ChatClient` (the `openai` client built from OPENAI_BASE_URL / OPENAI_API_KEY / a model
name, a per-request timeout, a bounded retry with exponential backoff for transient errors -
connection refused or reset, timeouts, 408/409/429 and 5xx - and the request statistics the
search log reports), `ChatAnswer`, and `LLMSetupError`, the one error that says what to set or
install.
Must not: build prompts or read answers (prompt.py and answer.py do); the `openai` client's own
retries are off so that every retry is counted and logged here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger("kernelpro.llm")

# A model name the OpenAI API serves; a local server (vLLM, llama.cpp, ...) names its own, set
# through the `llm_model` option or $OPENAI_MODEL.
DEFAULT_MODEL = "gpt-4o"
# A rewrite of a GEMM template is ~4 K tokens of output: ~60 s at ~70 tokens/s, so 180 s covers
# slow local servers without hanging a search forever on a dead one.
TIMEOUT_S = 180.0
RETRIES = 3  # after the first attempt: 1 + 2 + 4 s of backoff before giving up on a node
BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
TRANSIENT_STATUS = (408, 409, 429)  # and every 5xx


class LLMSetupError(RuntimeError):
    """The LLM proposer cannot run: a package, a setting or the endpoint's answer to it is
    wrong. The message says what to install or set."""


@dataclasses.dataclass(frozen=True)
class ChatAnswer:
    text: str
    finish_reason: str | None  # "length": the answer was cut at the server's token limit


@dataclasses.dataclass
class ChatStats:
    requests: int = 0  # HTTP attempts, retries included
    retries: int = 0
    failed_calls: int = 0  # calls that returned no answer (retries exhausted, bad request)
    prompt_tokens: int = 0  # as the server reports them (0 from servers that do not)
    completion_tokens: int = 0
    latency_s: float = 0.0  # wall time of all attempts, backoff excluded


class ChatClient:
    """Sends chat messages, returns the answer's text or None (a logged failure)."""

    def __init__(
        self,
        client: Any,
        model: str,
        *,
        openai_module: Any,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        json_mode: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.model, self.openai = client, model, openai_module
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        # response_format={"type": "json_object"} until the server rejects it (some
        # OpenAI-compatible servers answer 400 to it); answers are parsed leniently either way.
        self.json_mode = json_mode
        self.sleep, self.clock = sleep, clock
        self.stats = ChatStats()

    @classmethod
    def from_environ(
        cls,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = TIMEOUT_S,
        **kwargs: Any,
    ) -> ChatClient:
        """The client for OPENAI_BASE_URL with OPENAI_API_KEY; the model is `model`, else
        $OPENAI_MODEL, else DEFAULT_MODEL. Raises LLMSetupError saying what is missing."""
        env = os.environ if environ is None else environ
        try:
            import openai
        except ImportError as e:
            raise LLMSetupError(
                f"proposer='llm' needs the openai package ({e}); install it with "
                "`pip install 'openai>=1.0'` (kernelpro declares it), or use proposer='rules'"
            ) from None
        missing = [name for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY") if not env.get(name)]
        if missing:
            raise LLMSetupError(
                f"proposer='llm' needs {' and '.join(missing)} set in the environment: "
                "OPENAI_BASE_URL is the OpenAI-compatible endpoint (e.g. "
                "http://localhost:8000/v1 for a local vLLM server, https://api.openai.com/v1 for "
                "OpenAI) and OPENAI_API_KEY its key (any non-empty value for a server without "
                "keys); or use proposer='rules'"
            )
        client = openai.OpenAI(
            base_url=env["OPENAI_BASE_URL"],
            api_key=env["OPENAI_API_KEY"],
            timeout=timeout_s,
            max_retries=0,  # retried here, counted and logged
        )
        chosen = model or env.get("OPENAI_MODEL") or DEFAULT_MODEL
        return cls(client, chosen, openai_module=openai, **kwargs)

    def complete(self, messages: Sequence[dict[str, str]]) -> ChatAnswer | None:
        """The answer to `messages`, or None after a logged failure: transient errors retried
        `retries` times, or a request the server refuses (400/422). Errors that no later request
        can fix (401, 403, 404) raise LLMSetupError."""
        attempt = 0
        while True:
            kwargs: dict[str, Any] = {"model": self.model, "messages": list(messages)}
            if self.json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            self.stats.requests += 1
            start = self.clock()
            try:
                response = self.client.chat.completions.create(**kwargs)
            except self.openai.APIStatusError as e:
                self.stats.latency_s += self.clock() - start
                status = int(e.status_code)
                if status in (400, 422) and self.json_mode:
                    log.warning(
                        "%s answered %d to response_format=json_object (%s); "
                        "asking again without it, for the rest of this search",
                        self._where(),
                        status,
                        _short(e),
                    )
                    self.json_mode = False
                    continue
                if status in (401, 403):
                    raise LLMSetupError(
                        f"{self._where()} refused the key ({status}: {_short(e)}); "
                        "check OPENAI_API_KEY"
                    ) from None
                if status == 404:
                    raise LLMSetupError(
                        f"{self._where()} answered 404 for model {self.model!r} "
                        f"({_short(e)}); check OPENAI_BASE_URL (it usually ends in /v1) and "
                        "the model name (the `llm_model` option or $OPENAI_MODEL)"
                    ) from None
                if status in TRANSIENT_STATUS or status >= 500:
                    if self._backoff(attempt, f"{status}: {_short(e)}", _retry_after(e)):
                        attempt += 1
                        continue
                    return None
                log.warning(
                    "%s refused the request (%d: %s); no proposals from it for this node",
                    self._where(),
                    status,
                    _short(e),
                )
                self.stats.failed_calls += 1
                return None
            except self.openai.APIConnectionError as e:  # refused, reset, timed out
                self.stats.latency_s += self.clock() - start
                if self._backoff(attempt, f"{type(e).__name__}: {_short(e)}", None):
                    attempt += 1
                    continue
                return None
            except (self.openai.APIError, ValueError) as e:  # e.g. a body that is not JSON
                self.stats.latency_s += self.clock() - start
                log.warning(
                    "%s gave an answer the openai client cannot read (%s: %s); "
                    "no proposals from it for this node",
                    self._where(),
                    type(e).__name__,
                    _short(e),
                )
                self.stats.failed_calls += 1
                return None
            self.stats.latency_s += self.clock() - start
            return self._answer(response)

    def _answer(self, response: Any) -> ChatAnswer:
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.stats.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.stats.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(response, "choices", None) or []
        if not choices:
            return ChatAnswer("", None)
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None) or ""
        return ChatAnswer(str(text), getattr(choices[0], "finish_reason", None))

    def _backoff(self, attempt: int, error: str, retry_after: float | None) -> bool:
        """Sleep before the next attempt and return True, or log the give-up and return False."""
        if attempt >= self.retries:
            log.warning(
                "%s failed %d times, last with %s; no proposals from it for this node",
                self._where(),
                attempt + 1,
                error,
            )
            self.stats.failed_calls += 1
            return False
        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
        if retry_after is not None:
            delay = min(self.max_backoff_s, max(delay, retry_after))
        log.info(
            "%s: %s; retry %d/%d in %.1f s",
            self._where(),
            error,
            attempt + 1,
            self.retries,
            delay,
        )
        self.stats.retries += 1
        self.sleep(delay)
        return True

    def _where(self) -> str:
        return f"the endpoint at {getattr(self.client, 'base_url', '?')}"


def _retry_after(e: Any) -> float | None:
    """The server's Retry-After, in seconds, when it sent one as a number."""
    headers = getattr(getattr(e, "response", None), "headers", None) or {}
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: the backoff's own delay is used
        return None


def _short(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
