"""The ``llm`` writer: memory written by any OpenAI-compatible chat-completions endpoint.

The model gets the topic contract (system prompt), the batch as one JSON object per turn plus
the workspace structure (user prompt), and five file tools confined to the stage's ``topics/``
(:mod:`.llm_tools`). It loops tool calls for at most ``max_turns`` rounds. Every call is
audited; each run is appended to ``agent-history.jsonl``. What the run changed is decided by
the transaction afterwards, never by what the model says it did.

Failures are classified so the write path can report them and the watcher can decide whether
to retry: the SDK's own retries are off (``max_retries=0``) and every request has a timeout,
so an unreachable, slow or failing endpoint ends the run with a ``MODEL_*`` code instead of a
hang. The run as a whole has a deadline too (``run_timeout_seconds``, default five request
timeouts): the write path holds the workspace lock for the whole run, so no request may wait
past it; a run that reaches it ends as a retryable ``MODEL_TIMEOUT`` and nothing is installed or
marked. ``openai`` is imported lazily: the rest of scriptorium works without the extra.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ...config import Settings
from ...errors import InvalidInput, ReasonCode, ScriptoriumError, WriteFailed
from ...tokens import count_tokens
from .base import WriteRequest, WriterAudit
from .llm_prompt import build_prompt
from .llm_tools import AUDIT_OUTPUT_CHARS, TOOL_SCHEMAS, StageTools

HISTORY_FILE = "agent-history.jsonl"
NO_KEY_PLACEHOLDER = "no-key"  # sent when api_key_env is "" (local servers that need no key)
RUN_TIMEOUT_FACTOR = 5  # default run deadline, in request timeouts


class ModelError(WriteFailed):
    """The model endpoint failed; ``code`` is a ``MODEL_*`` reason with the retry verdict."""

    code = ReasonCode.MODEL_FAILURE_UNKNOWN


class WriterSetupError(InvalidInput):
    """The llm writer cannot start: missing extra or incomplete configuration."""

    code = ReasonCode.WRITER_PRECONDITION_FAILED


def _status_error(status: int, message: str) -> ModelError:
    lowered = message.lower()
    if status == 401:
        return ModelError(f"the model endpoint refused the API key (401): {message}",
                          code=ReasonCode.MODEL_AUTHENTICATION, retryable=False)
    if status == 403:
        return ModelError(f"the API key may not use this model (403): {message}",
                          code=ReasonCode.MODEL_AUTHORIZATION, retryable=False)
    if status == 408:
        return ModelError(f"the model endpoint timed out (408): {message}",
                          code=ReasonCode.MODEL_TIMEOUT, retryable=True)
    if status == 429:
        return ModelError(f"the model endpoint is rate limiting (429): {message}",
                          code=ReasonCode.MODEL_RATE_LIMIT, retryable=True)
    if status >= 500:
        return ModelError(f"the model provider failed ({status}): {message}",
                          code=ReasonCode.MODEL_PROVIDER_INTERNAL, retryable=True)
    if status in (400, 404, 413, 422):
        if "context" in lowered and ("length" in lowered or "window" in lowered) \
                or "too many tokens" in lowered or "maximum context" in lowered:
            return ModelError(f"the prompt is too long for the model ({status}): {message}",
                              code=ReasonCode.MODEL_CONTEXT_LENGTH, retryable=False)
        if "content_policy" in lowered or "content policy" in lowered \
                or "content_filter" in lowered or "safety" in lowered:
            return ModelError(f"the provider's content policy refused the request ({status}): "
                              f"{message}", code=ReasonCode.MODEL_CONTENT_POLICY, retryable=False)
        return ModelError(f"the model endpoint rejected the request ({status}): {message}",
                          code=ReasonCode.MODEL_INVALID_REQUEST, retryable=False)
    return ModelError(f"the model endpoint answered {status}: {message}",
                      code=ReasonCode.MODEL_FAILURE_UNKNOWN, retryable=status == 409)


def classify_openai_error(exc: BaseException, base_url: str = "") -> ModelError:
    """Map an ``openai`` SDK exception to a ``MODEL_*`` failure with its retry verdict."""
    import openai

    where = f" at {base_url}" if base_url else ""
    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, openai.APITimeoutError):
        return ModelError(f"the model endpoint{where} did not answer in time",
                          code=ReasonCode.MODEL_TIMEOUT, retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {' '.join(str(cause).split())[:200]}" if cause else ""
        return ModelError(f"cannot reach the model endpoint{where}{detail}",
                          code=ReasonCode.MODEL_TRANSPORT, retryable=True)
    if isinstance(exc, openai.APIStatusError):
        message = text
        body = exc.body
        if isinstance(body, Mapping):
            inner = body.get("error", body)
            if isinstance(inner, Mapping) and inner.get("message"):
                message = " ".join(str(inner["message"]).split())[:300]
        return _status_error(exc.status_code, message)
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelError(f"the model endpoint{where} sent a malformed response: {text}",
                          code=ReasonCode.MODEL_FAILURE_UNKNOWN, retryable=True)
    return ModelError(f"model call failed{where}: {type(exc).__name__}: {text}",
                      code=ReasonCode.MODEL_FAILURE_UNKNOWN, retryable=False)


@dataclass
class RunStats:
    rounds: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reason: str = ""
    final_text: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)


def _usage(response: Any, stats: RunStats) -> None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return
    for attr, target in (("prompt_tokens", "input_tokens"), ("completion_tokens",
                                                            "output_tokens")):
        value = getattr(usage, attr, 0)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            setattr(stats, target, getattr(stats, target) + value)


def _read_message(response: Any) -> tuple[str, list[tuple[str, str, Any]]]:
    """(text, [(call id, tool name, raw arguments)]) of the first choice; a response that
    does not have that shape is a classified failure, not an AttributeError."""
    try:
        choices = response.choices
        if not choices:
            raise ModelError("the model endpoint returned no choices",
                             code=ReasonCode.MODEL_FAILURE_UNKNOWN, retryable=True)
        message = choices[0].message
        content = message.content if isinstance(message.content, str) else ""
        calls = []
        for index, call in enumerate(message.tool_calls or []):
            cid = call.id if isinstance(call.id, str) and call.id else f"call_{index}"
            name = call.function.name if isinstance(call.function.name, str) else ""
            calls.append((cid, name, call.function.arguments))
    except (AttributeError, TypeError, IndexError, KeyError):
        raise ModelError("the model endpoint sent a response that is not a chat completion",
                         code=ReasonCode.MODEL_FAILURE_UNKNOWN, retryable=True) from None
    return content, calls


def _echo_arguments(raw: Any) -> str:
    """The arguments string sent back in the conversation (always a string)."""
    if isinstance(raw, str):
        return raw or "{}"
    try:
        return json.dumps(raw if raw is not None else {})
    except (TypeError, ValueError):
        return "{}"


def _parse_arguments(raw: Any) -> tuple[Any, str | None]:
    if isinstance(raw, dict):
        return raw, None
    if raw is None or raw == "":
        return {}, None
    try:
        return json.loads(raw), None
    except (TypeError, ValueError) as exc:
        return raw, f"Error: the arguments are not valid JSON ({exc}); send one JSON object."


@dataclass
class LLMWriter:
    """Writes memory through an OpenAI-compatible endpoint (see the module docstring).

    ``api_key_env`` names the environment variable holding the key; ``""`` means the
    endpoint needs no key (a local llama.cpp or Ollama server)."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    max_turns: int = 20
    timeout_seconds: float = 60.0
    run_timeout_seconds: float | None = None  # None: RUN_TIMEOUT_FACTOR x timeout_seconds
    environ: Mapping[str, str] | None = None  # default: os.environ at run time
    clock: Callable[[], float] = time.monotonic  # the deadline's clock (tests pin it)

    name: str = field(default="llm", init=False)
    # A rejected commit earns one run told why.
    repair_attempts: int = field(default=1, init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> "LLMWriter":
        return cls(base_url=settings.llm_base_url, model=settings.llm_model,
                   api_key_env=settings.llm_api_key_env, max_turns=settings.llm_max_turns,
                   timeout_seconds=settings.llm_timeout_seconds,
                   run_timeout_seconds=settings.llm_run_timeout_seconds or None)

    @property
    def run_deadline_seconds(self) -> float:
        """How long one run may take, every request and tool call included."""
        if self.run_timeout_seconds is not None:
            return float(self.run_timeout_seconds)
        return RUN_TIMEOUT_FACTOR * float(self.timeout_seconds)

    # -- setup ----------------------------------------------------------------------------------

    def api_key(self) -> str:
        if not self.api_key_env:
            return NO_KEY_PLACEHOLDER
        env = os.environ if self.environ is None else self.environ
        key = env.get(self.api_key_env, "")
        if not key.strip():
            raise ModelError(
                f"the llm writer's API key is missing: environment variable "
                f"{self.api_key_env} is not set (set it, or set [writer.llm] api_key_env = "
                f"\"\" for an endpoint without keys)",
                code=ReasonCode.MODEL_AUTHENTICATION, retryable=False)
        return key.strip()

    def client(self) -> Any:
        """An SDK client with a timeout on every request and no retries of its own."""
        if not self.base_url.strip():
            raise WriterSetupError("the llm writer has no endpoint: set [writer.llm] base_url "
                                   "in config.toml or SCRIPTORIUM_LLM_BASE_URL")
        if not self.model.strip():
            raise WriterSetupError("the llm writer has no model: set [writer.llm] model in "
                                   "config.toml or SCRIPTORIUM_LLM_MODEL")
        if self.max_turns < 1:
            raise WriterSetupError(f"invalid llm max_turns {self.max_turns} (at least 1)")
        if not self.timeout_seconds or self.timeout_seconds <= 0:
            raise WriterSetupError(f"invalid llm timeout_seconds {self.timeout_seconds} "
                                   "(must be positive: a request without a timeout can hang)")
        if self.run_deadline_seconds <= 0:
            raise WriterSetupError(f"invalid llm run_timeout_seconds {self.run_timeout_seconds}"
                                   " (must be positive: the run holds the workspace lock)")
        key = self.api_key()
        try:
            import openai
        except ImportError:
            raise WriterSetupError("the llm writer needs the openai package: "
                                   "pip install 'scriptorium[llm]'") from None
        return openai.OpenAI(base_url=self.base_url.strip(), api_key=key,
                             timeout=float(self.timeout_seconds), max_retries=0)

    # -- the run --------------------------------------------------------------------------------

    def write(self, request: WriteRequest) -> WriterAudit:
        return self.run(build_prompt(
            request.batch, request.stage, session_title=request.session_title,
            cited=request.cited, purpose=request.purpose, rejection=request.rejection), request)

    def run(self, messages: list[dict[str, Any]], request: WriteRequest) -> WriterAudit:
        """Drive the model over ``messages`` with the file tools of ``request.stage``: every
        call audited, the run logged to ``request.log_dir``, endpoint failures classified
        (``MODEL_*``). The task is the caller's (a batch of turns, or a reorganize)."""
        audit = WriterAudit(writer=self.name)
        stats = RunStats()
        prompt_chars = sum(len(m["content"]) for m in messages)
        prompt_tokens = sum(count_tokens(m["content"]) for m in messages)
        try:
            client = self.client()
            # one deadline per job: a repair run gets only what the first run left
            deadline = request.shared.setdefault("llm_deadline",
                                                 self.clock() + self.run_deadline_seconds)
            self._loop(client, messages, StageTools(request.stage), audit, stats, deadline)
        except ScriptoriumError as exc:
            self._finish(audit, stats, request, prompt_chars, prompt_tokens,
                         outcome=exc.code, error=exc)
            raise
        except Exception as exc:
            error = classify_openai_error(exc, self.base_url) if _is_openai_error(exc) else None
            if error is None:
                self._finish(audit, stats, request, prompt_chars, prompt_tokens,
                             outcome=ReasonCode.WRITER_FAILURE_UNKNOWN, error=exc)
                raise
            self._finish(audit, stats, request, prompt_chars, prompt_tokens,
                         outcome=error.code, error=error)
            raise error from None
        self._finish(audit, stats, request, prompt_chars, prompt_tokens, outcome=stats.reason)
        return audit

    def _loop(self, client: Any, messages: list[dict[str, Any]], tools: StageTools,
              audit: WriterAudit, stats: RunStats, deadline: float) -> None:
        stats.reason = "max_turns"
        for round_no in range(1, self.max_turns + 1):
            stats.rounds = round_no
            left = deadline - self.clock()
            if left <= 0:
                raise self._past_deadline(round_no - 1)
            try:  # no request waits past the run's deadline
                response = client.chat.completions.create(
                    model=self.model, messages=messages, tools=TOOL_SCHEMAS,
                    timeout=min(float(self.timeout_seconds), left))
            except Exception:
                if self.clock() >= deadline:
                    raise self._past_deadline(round_no) from None
                raise
            _usage(response, stats)
            content, calls = _read_message(response)
            entry: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                entry["tool_calls"] = [{"id": cid, "type": "function",
                                        "function": {"name": name,
                                                     "arguments": _echo_arguments(args)}}
                                       for cid, name, args in calls]
            messages.append(entry)
            if not calls:
                stats.reason = "finished"
                stats.final_text = " ".join(content.split())[:500]
                return
            for cid, name, args in calls:
                messages.append({"role": "tool", "tool_call_id": cid,
                                 "content": self._call(tools, name, args, round_no, audit,
                                                       stats)})

    def _past_deadline(self, rounds: int) -> ModelError:
        return ModelError(
            f"the llm writer's run reached its deadline ({self.run_deadline_seconds:g} s, "
            f"[writer.llm] run_timeout_seconds) after {rounds} model request(s); nothing was "
            f"installed or marked and the next write retries",
            code=ReasonCode.MODEL_TIMEOUT, retryable=True)

    @staticmethod
    def _call(tools: StageTools, name: str, raw_arguments: Any, round_no: int,
              audit: WriterAudit, stats: RunStats) -> str:
        arguments, problem = _parse_arguments(raw_arguments)
        if problem is not None:
            status, output = "error", problem
        else:
            result = tools.run(name, arguments)
            status, output = result.status, result.output
        stats.tool_calls += 1
        stats.calls.append({"round": round_no, "tool": name, "status": status})
        audit.add(name, status, round=round_no, arguments=_audit_arguments(arguments),
                  output=output[:AUDIT_OUTPUT_CHARS])
        return output

    # -- audit and run log ------------------------------------------------------------------------

    def _finish(self, audit: WriterAudit, stats: RunStats, request: WriteRequest,
                prompt_chars: int, prompt_tokens: int, *, outcome: str,
                error: BaseException | None = None) -> None:
        status = "error" if error is not None else "ok"
        final: dict[str, Any] = {"round": stats.rounds, "reason": outcome,
                                 "rounds": stats.rounds, "turns": stats.tool_calls,
                                 "input_tokens": stats.input_tokens,
                                 "output_tokens": stats.output_tokens, "model": self.model}
        if error is not None:
            final["output"] = str(error)[:AUDIT_OUTPUT_CHARS]
        audit.add("agent", status, **final)
        errors = sum(1 for c in stats.calls if c["status"] == "error")
        audit.summary = (f"{outcome}: {stats.rounds} round(s), {stats.tool_calls} tool call(s)"
                         f" ({errors} refused or failed), {stats.input_tokens}+"
                         f"{stats.output_tokens} tokens"
                         + (f"; model said: {stats.final_text[:200]}" if stats.final_text
                            else "")
                         + (f"; {error}" if error is not None else ""))
        if request.log_dir is None:
            return
        line = {
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "writer": self.name, "model": self.model, "base_url": self.base_url,
            "purpose": request.purpose, "repair": request.rejection is not None,
            "refs": [r.source_id for r in request.batch],
            "prompt_chars": prompt_chars, "prompt_tokens": prompt_tokens,
            "rounds": stats.rounds, "tool_calls": stats.calls,
            "input_tokens": stats.input_tokens, "output_tokens": stats.output_tokens,
            "outcome": outcome, "retryable": getattr(error, "retryable", None),
            "error": str(error)[:AUDIT_OUTPUT_CHARS] if error is not None else None,
        }
        append_history(Path(request.log_dir), line)


def append_history(log_dir: Path, line: dict[str, Any]) -> None:
    """Append one JSON line (one ``write`` call on an O_APPEND fd, so concurrent runs do not
    interleave). Best effort: a log that cannot be written never fails a memory write."""
    data = (json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)
            + "\n").encode("utf-8")
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(log_dir / HISTORY_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError:
        pass


def _audit_arguments(arguments: Any) -> Any:
    """Arguments as audited: long strings (whole file contents) cut to the audit limit."""
    if isinstance(arguments, dict):
        return {k: (v[:AUDIT_OUTPUT_CHARS] + "…" if isinstance(v, str)
                    and len(v) > AUDIT_OUTPUT_CHARS else v) for k, v in arguments.items()}
    if isinstance(arguments, str):
        return arguments[:AUDIT_OUTPUT_CHARS]
    return arguments


def _is_openai_error(exc: BaseException) -> bool:
    try:
        import openai
    except ImportError:
        return False
    return isinstance(exc, openai.OpenAIError)
