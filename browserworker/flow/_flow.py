"""The flow authoring API: :class:`Flow`, steps, effects, verdicts and the step context.

A flow is an ordered list of steps. *Actions* (``@flow.step``) rebuild page state and
are re-run on every attempt. *Effects* (``@flow.effect``) change the outside world:
their intent is journaled before they run, the requests they send pass a dispatch
gate, and an optional verifier (``@effect.verify``) decides after a crash whether the
effect landed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, SecretBytes, SecretStr, ValidationError

from .._canonical import canonical_json, fingerprint_of
from ..errors import FlowDefinitionError, InputError, suggest
from ..store import limit_rules
from ..store.limit_rules import LimitKey
from . import _context_options as context_options
from . import _session_options as session_options
from ._context_options import ContextOptions
from ._dispatch_rules import ChannelRequest, is_dispatch, matches, rule_problem
from ._session_options import SessionKey

if TYPE_CHECKING:  # pragma: no cover
    from playwright.async_api import Page, Request
    from structlog.typing import FilteringBoundLogger

__all__ = [
    "DEFAULT_SETTLE",
    "Action",
    "ChannelRequest",
    "CheckFn",
    "Effect",
    "Flow",
    "Login",
    "NoInputs",
    "RecordedResponse",
    "Step",
    "StepContext",
    "Verdict",
    "canonical_json",
    "fingerprint_of",
    "where_defined",
]

DEFAULT_SETTLE = 30.0
"""Seconds a dispatched request may still be processed downstream after its sender stopped."""

InputsT = TypeVar("InputsT", bound=BaseModel)
StepFn = Callable[["StepContext[Any]"], Awaitable[Any]]
VerifyFn = Callable[["StepContext[Any]"], Awaitable["Verdict"]]
CountFn = Callable[["StepContext[Any]"], Awaitable[int]]
SendRule = bool | str | Callable[["Request"], bool]
_STEP_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


class NoInputs(BaseModel):
    """The inputs model of a flow that takes none."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Verdict:
    """What a verifier (or a ``confirm`` predicate) concluded about an effect."""

    kind: Literal["done", "not_done", "unknown"]
    result: Any = None
    reason: str | None = None

    @classmethod
    def done(cls, result: Any = None) -> Verdict:
        """The effect landed; ``result`` is journaled as the step's result."""
        return cls("done", result=result)

    @classmethod
    def not_done(cls, reason: str | None = None) -> Verdict:
        """The effect did not land: safe to replay with the same request key."""
        return cls("not_done", reason=reason)

    @classmethod
    def unknown(cls, reason: str) -> Verdict:
        """The outcome cannot be proven: park the run for human review."""
        return cls("unknown", reason=reason)


@dataclass(frozen=True)
class RecordedResponse:
    """A response to a dispatched request, as recorded in the outbox."""

    status: int
    url: str
    method: str
    headers: Mapping[str, str]

    @property
    def location(self) -> str | None:
        """The ``Location`` header of a redirect, if any."""
        return self.headers.get("location")


@dataclass
class StepContext(Generic[InputsT]):
    """Everything a step sees. ``request_key`` is stable across every attempt of a step."""

    page: Page
    inputs: InputsT
    run_id: str
    step_id: str
    attempt_no: int
    request_key: str
    fingerprint: str
    results: Mapping[str, Any]
    log: FilteringBoundLogger


def where_defined(fn: Callable[..., Any]) -> str:
    """Where ``fn`` is defined (``file:line``), for messages about a flow's definition."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    return f"{code.co_filename}:{code.co_firstlineno}"


@dataclass
class Step:
    """One step of a flow. Subclassed by :class:`Action` and :class:`Effect`."""

    id: str
    fn: StepFn
    kind: Literal["action", "effect"] = "action"
    retries: int = 0

    @property
    def where(self) -> str:
        """``file:line`` of the step's function, for messages."""
        return where_defined(self.fn)

    def verify(self, fn: VerifyFn) -> VerifyFn:
        raise FlowDefinitionError(
            f"{where_defined(fn)}: a verifier on action step {self.id!r}: only @flow.effect steps "
            "can have verifiers (actions are re-run on every attempt)"
        )


@dataclass
class Action(Step):
    """A step that rebuilds page state; re-run on every attempt, must be safe to repeat.

    ``sends`` declares the non-GET requests the action may send because they are safe to
    repeat (a login form, a search POST): a rule as for ``dispatch=`` (a URL glob,
    ``"METHOD glob"``, or a predicate on the request), or ``True`` for any. Requests it does
    not match are still undeclared side effects (warned, or refused in fail mode).
    """

    sends: SendRule = False

    def declares(self, method: str, url: str, request: Any = None) -> bool:
        """Whether the action declared this request with ``sends=``."""
        if self.sends is True:
            return True
        if self.sends is False:
            return False
        return matches(self.sends, method, url, request)


CheckFn = Callable[["StepContext[Any]"], Awaitable[bool]]


@dataclass
class Login(Action):
    """The login of a flow with ``Flow(session=...)`` (``@flow.login``): always its first step, id ``login``.

    It runs only when there is no saved session for the run's key (or the saved one is
    expired, unreadable, or ``@login.check`` says the page is not signed in); after it, the
    browser context's storage state is saved for later runs (``docs/sessions.md``).
    """

    checker: CheckFn | None = field(default=None, repr=False)

    def check(self, fn: CheckFn) -> CheckFn:
        """Register the check that a reused session is signed in (``async def``, returns a bool)."""
        if not inspect.iscoroutinefunction(fn):
            raise FlowDefinitionError(f"{where_defined(fn)}: session check {fn.__name__!r} must be `async def`")
        if self.checker is not None:
            raise FlowDefinitionError(f"{where_defined(fn)}: the login of this flow already has a check")
        self.checker = fn
        return fn


@dataclass
class Effect(Step):
    """A step that changes the world: journaled as intent before it is dispatched."""

    kind: Literal["action", "effect"] = "effect"
    settle: float = DEFAULT_SETTLE
    idempotent: bool = False
    dispatch: Callable[[Request], bool] | str | None = None
    confirm: Callable[[RecordedResponse], Verdict | bool | None] | None = None
    fingerprint_fn: Callable[[BaseModel, Mapping[str, Any]], Any] | None = None
    verifier: VerifyFn | None = field(default=None, repr=False)
    counter: CountFn | None = field(default=None, repr=False)
    approve: bool | Callable[[BaseModel], bool] = False  # a person approves each dispatch (docs/approvals.md)
    approve_timeout: float | None = None  # seconds an approval may wait (None: the engine's ApprovalSettings.ttl)

    def count(self, fn: CountFn) -> CountFn:
        """Register a probe that counts how many times this effect landed for ``ctx.request_key``.

        Used by ``browserworker chaos`` to detect duplicates (a verifier can only say yes/no).
        """
        if not inspect.iscoroutinefunction(fn):
            raise FlowDefinitionError(f"{where_defined(fn)}: count probe {fn.__name__!r} must be `async def`")
        self.counter = fn
        return fn

    def verify(self, fn: VerifyFn) -> VerifyFn:
        """Register the verifier that decides, after a crash, whether this effect landed."""
        if not inspect.iscoroutinefunction(fn):
            raise FlowDefinitionError(f"{where_defined(fn)}: verifier {fn.__name__!r} must be `async def`")
        if self.verifier is not None:
            raise FlowDefinitionError(f"{where_defined(fn)}: effect {self.id!r} already has a verifier")
        self.verifier = fn
        return fn

    def is_dispatch(self, method: str, url: str, request: Any = None) -> bool:
        """Whether a request counts as "sent" and must pass the dispatch gate."""
        return is_dispatch(self.dispatch, method, url, request)

    def judge(self, response: RecordedResponse) -> Verdict | None:
        """Apply the ``confirm`` predicate to a recorded response (None: can't tell)."""
        if self.confirm is None:
            return None
        verdict = self.confirm(response)
        if verdict is None or isinstance(verdict, Verdict):
            return verdict
        return Verdict.done() if verdict else Verdict.not_done("confirm rejected the response")


def _check_rule(where: str, what: str, rule: object) -> None:
    if rule is None:
        return
    problem = rule_problem(rule)
    if problem is not None:
        raise FlowDefinitionError(f"{where}: {what} {problem}")


class Flow(Generic[InputsT]):
    """An ordered list of steps with a validated inputs model.

    ``redact`` names input fields (or query/form parameters) that must never be written
    to logs or recordings; ``SecretStr`` inputs are redacted without being named.
    ``undeclared_effects`` says what happens when an action sends a non-GET request:
    ``"warn"`` (default) or ``"fail"``. ``context`` gives each run's browser context options
    (``Browser.new_context``'s: ``locale``, ``http_credentials``, ``viewport``, ``proxy``...),
    as a mapping or a function of the validated inputs (:mod:`browserworker.flow._context_options`).
    ``session`` is the key of a login session saved and reused across runs (a string, or a
    function of the inputs), signed in by the ``@flow.login`` step; a saved session older than
    ``session_max_age`` (a timedelta or seconds; default 12 hours) is not reused
    (:mod:`browserworker.runtime._login_sessions`).
    ``limit`` names the key whose budget its runs count against (default: the flow's name), or
    derives it from the validated inputs (:mod:`browserworker.store.limit_rules`).
    """

    def __init__(
        self,
        name: str,
        inputs: type[InputsT] | None = None,
        *,
        redact: list[str] | tuple[str, ...] = (),
        undeclared_effects: Literal["warn", "fail"] = "warn",
        context: ContextOptions = None,
        session: SessionKey = None,
        session_max_age: timedelta | float | None = None,
        limit: LimitKey = None,
    ) -> None:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
            raise FlowDefinitionError(f"flow name {name!r} must be 1-64 letters, digits, '-', '_' or '.'")
        if inputs is not None and not (isinstance(inputs, type) and issubclass(inputs, BaseModel)):
            raise FlowDefinitionError(f"flow {name!r}: inputs= must be a pydantic BaseModel subclass")
        if undeclared_effects not in ("warn", "fail"):
            raise FlowDefinitionError(f"flow {name!r}: undeclared_effects must be 'warn' or 'fail'")
        self.name = name
        self.inputs_model: type[BaseModel] = inputs or NoInputs
        self.redact = tuple(redact)
        self.undeclared_effects = undeclared_effects
        self.context = (
            context if context is None or callable(context) else context_options.check(context, f"flow {name!r}")
        )
        self.session, self.session_max_age = session_options.check(session, session_max_age, f"flow {name!r}")
        self.limit = limit_rules.check_limit(limit, name)
        self._steps: list[Step] = []
        self._login: Login | None = None

    def __repr__(self) -> str:
        return f"Flow({self.name!r}, steps={[s.id for s in self._steps]})"

    # -- registration -------------------------------------------------------------

    def _add(self, step: Step) -> None:
        if not inspect.iscoroutinefunction(step.fn):
            raise FlowDefinitionError(f"{step.where}: step {step.id!r} must be `async def`")
        if not _STEP_ID.match(step.id):
            raise FlowDefinitionError(
                f"{step.where}: step id {step.id!r} must start with a letter and use letters, digits, '_', '.', '-'"
            )
        for other in self._steps:
            if other.id == step.id:
                raise FlowDefinitionError(
                    f"{step.where}: duplicate step id {step.id!r} in flow {self.name!r} (first defined at {other.where})"
                )
        if step.retries < 0:
            raise FlowDefinitionError(f"{step.where}: retries must be >= 0")
        self._steps.append(step)

    @overload
    def step(self, fn: StepFn) -> Action: ...
    @overload
    def step(
        self, *, id: str | None = None, retries: int = 0, sends: SendRule = False
    ) -> Callable[[StepFn], Action]: ...

    def step(
        self, fn: StepFn | None = None, *, id: str | None = None, retries: int = 0, sends: SendRule = False
    ) -> Action | Callable[[StepFn], Action]:
        """Register an action: re-run on every attempt, must be safe to repeat."""

        def register(f: StepFn) -> Action:
            if not isinstance(sends, bool):
                _check_rule(where_defined(f), "sends=", sends)
            action = Action(id=id or f.__name__, fn=f, retries=retries, sends=sends)
            self._add(action)
            return action

        return register(fn) if fn is not None else register

    @overload
    def effect(self, fn: StepFn) -> Effect: ...
    @overload
    def effect(
        self,
        *,
        id: str | None = None,
        settle: float = DEFAULT_SETTLE,
        confirm: Callable[[RecordedResponse], Verdict | bool | None] | None = None,
        idempotent: bool = False,
        dispatch: Callable[[Request], bool] | str | None = None,
        retries: int = 0,
        fingerprint: Callable[[BaseModel, Mapping[str, Any]], Any] | None = None,
        approve: bool | Callable[[BaseModel], bool] = False,
        approve_timeout: float | None = None,
    ) -> Callable[[StepFn], Effect]: ...

    def effect(
        self,
        fn: StepFn | None = None,
        *,
        id: str | None = None,
        settle: float = DEFAULT_SETTLE,
        confirm: Callable[[RecordedResponse], Verdict | bool | None] | None = None,
        idempotent: bool = False,
        dispatch: Callable[[Request], bool] | str | None = None,
        retries: int = 0,
        fingerprint: Callable[[BaseModel, Mapping[str, Any]], Any] | None = None,
        approve: bool | Callable[[BaseModel], bool] = False,
        approve_timeout: float | None = None,
    ) -> Effect | Callable[[StepFn], Effect]:
        """Register a side effect: its intent is journaled before it runs."""

        def register(f: StepFn) -> Effect:
            if settle < 0:
                raise FlowDefinitionError(f"{where_defined(f)}: settle must be >= 0 seconds")
            _check_rule(where_defined(f), "dispatch=", dispatch)
            if approve_timeout is not None and approve_timeout <= 0:
                raise FlowDefinitionError(f"{where_defined(f)}: approve_timeout must be > 0 seconds")
            eff = Effect(
                id=id or f.__name__,
                fn=f,
                retries=retries,
                settle=float(settle),
                idempotent=idempotent,
                dispatch=dispatch,
                confirm=confirm,
                fingerprint_fn=fingerprint,
                approve=approve,
                approve_timeout=None if approve_timeout is None else float(approve_timeout),
            )
            self._add(eff)
            return eff

        return register(fn) if fn is not None else register

    def login(
        self, fn: StepFn | None = None, *, sends: SendRule = True, retries: int = 0
    ) -> Login | Callable[[StepFn], Login]:
        """Register the login of a flow with ``session=``: its first step (whatever was declared
        before it), id ``login``, run only when no signed-in session is saved for the run's key.
        It may send what ``sends`` says (default: anything: a login form's POST is safe to repeat)."""

        def register(f: StepFn) -> Login:
            if self.session is None:
                raise FlowDefinitionError(
                    f"{where_defined(f)}: @flow.login needs Flow(..., session=KEY): the key the "
                    "saved login is kept under"
                )
            if self._login is not None:
                raise FlowDefinitionError(f"{where_defined(f)}: flow {self.name!r} already has a login")
            if not isinstance(sends, bool):
                _check_rule(where_defined(f), "sends=", sends)
            step = Login(id="login", fn=f, retries=retries, sends=sends)
            self._add(step)
            self._steps.insert(0, self._steps.pop())
            self._login = step
            return step

        return register(fn) if fn is not None else register

    # -- queries ------------------------------------------------------------------

    @property
    def login_step(self) -> Login | None:
        """The ``@flow.login`` step, if the flow has one."""
        return self._login

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self._steps)

    def get(self, step_id: str) -> Step | None:
        return next((s for s in self._steps if s.id == step_id), None)

    def preceding(self, step_id: str) -> list[Step]:
        """The steps declared before ``step_id``."""
        out: list[Step] = []
        for s in self._steps:
            if s.id == step_id:
                return out
            out.append(s)
        raise KeyError(step_id)

    # -- inputs and fingerprints ------------------------------------------------

    def validate_inputs(self, data: Mapping[str, Any], *, also: Sequence[str] = ()) -> BaseModel:
        """Validate raw inputs into the flow's model; :class:`InputError` names every problem
        (``also``: problems found before, e.g. a malformed ``--input``, reported with them).

        An input the model has no field for is an error too (a typo must not be dropped in
        silence), unless the model allows extras (``model_config = ConfigDict(extra="allow")``):
        the message names the flow's inputs and the close match, if there is one."""
        model = self.inputs_model
        problems = list(also)
        checked = dict(data)
        if model.model_config.get("extra") != "allow":
            known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
            unknown = sorted(set(data) - known)
            for key in unknown:
                checked.pop(key)
                problems.append(f"unknown input {key!r}{suggest(key, known)}")
        try:
            validated = model.model_validate(checked)
        except ValidationError as exc:
            problems += [f"{'.'.join(str(p) for p in err['loc']) or '(inputs)'}: {err['msg']}" for err in exc.errors()]
            validated = None
        if problems or validated is None:
            names = ", ".join(sorted(model.model_fields)) or "none"
            raise InputError(f"invalid inputs for flow {self.name!r}: {'; '.join(problems)} (its inputs: {names})")
        return validated

    def context_options(self, inputs: BaseModel) -> dict[str, Any]:
        """The browser context options of a run with these inputs (``Flow(context=...)``)."""
        where = f"flow {self.name!r}" + (
            f" (context= at {where_defined(self.context)})" if callable(self.context) else ""
        )
        return context_options.resolve(self.context, inputs, where)

    def session_key(self, inputs: BaseModel) -> str | None:
        """The key of the login session a run with these inputs uses (``Flow(session=...)``), or None."""
        return session_options.key(self.session, inputs, f"flow {self.name!r}")

    def limit_key(self, inputs: BaseModel) -> str:
        """The limit key of a run with these inputs (``Flow(limit=...)``)."""
        return limit_rules.resolve_key(self.limit, inputs, self.name)

    def dump_inputs(self, model: BaseModel) -> dict[str, Any]:
        """Validated inputs as JSON data to store, with secret values revealed (the store needs them)."""
        data = model.model_dump(mode="json")
        for name in data:
            value = getattr(model, name, None)
            if isinstance(value, SecretStr | SecretBytes):
                raw = value.get_secret_value()
                data[name] = raw.decode() if isinstance(raw, bytes) else raw
        return data

    def secret_fields(self) -> set[str]:
        """Input fields whose values must never be written out."""
        names = set(self.redact)
        for fname, finfo in self.inputs_model.model_fields.items():
            ann = finfo.annotation
            extra = finfo.json_schema_extra if isinstance(finfo.json_schema_extra, dict) else {}
            if ann in (SecretStr, SecretBytes) or extra.get("secret"):
                names.add(fname)
        return names

    def fingerprint(self, step: Step, inputs: BaseModel, results: Mapping[str, Any]) -> str:
        """sha256 of what the step will send: flow name, step id, inputs (or the effect's own)."""
        if isinstance(step, Effect) and step.fingerprint_fn is not None:
            payload: Any = {"flow": self.name, "step": step.id, "custom": step.fingerprint_fn(inputs, results)}
        else:
            payload = {"flow": self.name, "step": step.id, "inputs": inputs.model_dump(mode="json")}
        return fingerprint_of(payload)
