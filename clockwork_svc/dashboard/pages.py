"""The dashboard's pages (/ui), rendered on the server from Jinja templates shipped in
the package (no script, no CDN).

Every page calls the api's own handlers in-process (server/local_calls.py) with the
signed-in session's token, so it sees and does exactly what that token may through
the gRPC API: a tenant its own schedules, an admin the cluster too. Every action is a
POST form carrying the session's CSRF token; a page answers a refused call with the
API's message.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import jinja2
from aiohttp import web
from google.protobuf import message

from clockwork_svc.api.v1 import cluster_pb2, convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.dashboard import words
from clockwork_svc.dashboard.session import TENANT_COOKIE, TOKEN_COOKIE, Csrf, Session
from clockwork_svc.domain import durations
from clockwork_svc.server.auth import DEFAULT_TENANT
from clockwork_svc.server.local_calls import CallFailed, LocalCalls

_ASSETS = Path(__file__).parent
_SCHEDULER = "/clockwork.api.v1.SchedulerService/"
_CLUSTER = "/clockwork.api.v1.ClusterService/GetClusterLoad"
PAGE_SIZE = 50
# ListSchedules calls one page may make to fill itself when a filter matches sparsely,
# and the time its calls should end within: it makes no call that, as long as the last
# one, would end later (the page then links to the rest).
FILL_CALLS = 8
FILL_BUDGET_S = 0.15
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Dashboard:
    def __init__(self, calls: LocalCalls, secure_cookies: bool) -> None:
        self._calls = calls
        self._secure = secure_cookies
        self._csrf = Csrf()
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_ASSETS / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/ui", self._home)
        app.router.add_get("/ui/", self._home)
        app.router.add_static("/ui/static/", _ASSETS / "static")
        app.router.add_get("/ui/login", self._login_form)
        app.router.add_post("/ui/login", self._login)
        app.router.add_post("/ui/logout", self._logout)
        app.router.add_get("/ui/schedules", self._page(self._schedules))
        app.router.add_get("/ui/schedule", self._page(self._schedule))
        app.router.add_post("/ui/schedule", self._action(self._schedule_action))
        app.router.add_get("/ui/dead-letters", self._page(self._dead_letters))
        app.router.add_post("/ui/dead-letters", self._action(self._redrive))
        app.router.add_get("/ui/cluster", self._page(self._cluster))

    # --- sign-in ---------------------------------------------------------------------

    async def _home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/ui/schedules")

    async def _login_form(self, request: web.Request) -> web.StreamResponse:
        return self._render("login.html", None, error="")

    async def _login(self, request: web.Request) -> web.StreamResponse:
        _same_origin(request)
        form = await request.post()
        token, tenant = str(form.get("token", "")).strip(), str(form.get("tenant", "")).strip()
        # Neither: the default tenant of a server without auth (the CLI's default too);
        # a server with auth refuses it, saying a token is missing.
        session = Session(token, tenant or ("" if token else DEFAULT_TENANT))
        try:
            await self._call(session, "ListSchedules", pb.ListSchedulesRequest(page_size=1))
        except CallFailed as exc:
            return self._render("login.html", None, error=f"{exc.code.name}: {exc.details}")
        reply = web.HTTPSeeOther("/ui/schedules")
        for name, value in ((TOKEN_COOKIE, session.token), (TENANT_COOKIE, session.tenant)):
            reply.set_cookie(
                name,
                value,
                httponly=True,
                samesite="Strict",
                secure=self._secure,
                path="/ui",
            )
        raise reply

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        _same_origin(request)
        session = _session(request)
        form = await request.post()
        if not self._csrf.valid(session, str(form.get("csrf", ""))):
            raise web.HTTPForbidden(text="invalid CSRF token")
        reply = web.HTTPSeeOther("/ui/login")
        for name in (TOKEN_COOKIE, TENANT_COOKIE):
            reply.del_cookie(name, path="/ui")
        raise reply

    # --- pages -------------------------------------------------------------------------

    def _page(
        self, build: Callable[[web.Request, Session], Awaitable[web.StreamResponse]]
    ) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            session = _session(request)
            if not session.signed_in:
                raise web.HTTPSeeOther("/ui/login")
            try:
                return await build(request, session)
            except CallFailed as exc:
                return self._refused(session, exc)

        return handle

    def _action(self, act: Callable[[Session, Any], Awaitable[str]]) -> Handler:
        """A POST: checks the CSRF token, acts, then shows where the action says."""

        async def handle(request: web.Request) -> web.StreamResponse:
            _same_origin(request)
            session = _session(request)
            if not session.signed_in:
                raise web.HTTPSeeOther("/ui/login")
            form = await request.post()
            if not self._csrf.valid(session, str(form.get("csrf", ""))):
                raise web.HTTPForbidden(text="invalid CSRF token")
            try:
                location = await act(session, form)
            except CallFailed as exc:
                return self._refused(session, exc)
            raise web.HTTPSeeOther(location)

        return handle

    async def _schedules(self, request: web.Request, session: Session) -> web.StreamResponse:
        query = request.query
        prefix, selector = query.get("prefix", ""), query.get("selector", "")
        state = query.get("state", "")
        listing = pb.ListSchedulesRequest(
            page_size=PAGE_SIZE,
            page_token=query.get("page", ""),
            key_prefix=prefix,
            label_selector=selector,
        )
        if state in _STATES:
            listing.states.append(pb.ScheduleState.Value(state))
        started = time.monotonic()
        reply = await self._call(session, "ListSchedules", listing)
        found = list(reply.schedules)
        # A filtered call looks at a bounded number of schedules and may answer short:
        # follow its token to fill the page, while another call like the last one
        # still ends within the time budget.
        deadline = started + FILL_BUDGET_S
        last_s = time.monotonic() - started
        for _ in range(FILL_CALLS - 1):
            if len(found) >= PAGE_SIZE or not reply.next_page_token:
                break
            began = time.monotonic()
            if began + last_s > deadline:
                break
            listing.page_token = reply.next_page_token
            listing.page_size = PAGE_SIZE - len(found)
            reply = await self._call(session, "ListSchedules", listing)
            found += reply.schedules
            last_s = time.monotonic() - began
        rows = [_schedule_row(s) for s in found]
        next_page = ""
        if reply.next_page_token:
            next_page = "/ui/schedules?" + urllib.parse.urlencode(
                {
                    "prefix": prefix,
                    "state": state,
                    "selector": selector,
                    "page": reply.next_page_token,
                }
            )
        return self._render(
            "schedules.html",
            session,
            rows=rows,
            prefix=prefix,
            state=state,
            selector=selector,
            states=_STATES,
            next_page=next_page,
        )

    async def _schedule(self, request: web.Request, session: Session) -> web.StreamResponse:
        key = request.query.get("key", "")
        detail = await self._call(
            session,
            "GetSchedule",
            pb.GetScheduleRequest(key=key, upcoming_count=10, execution_count=20),
        )
        spec = convert.spec_from_pb(detail.spec)
        return self._render(
            "schedule.html",
            session,
            row=_schedule_row(detail),
            target=_target(detail.spec),
            upcoming=[words.when(_ms(t)) for t in detail.upcoming_fire_times],
            executions=[_execution_row(e) for e in detail.recent_executions],
            labels=sorted(detail.labels.items()),
            retry=spec.retry.resolved(),
            note=detail.pause_note,
            key=key,
        )

    async def _schedule_action(self, session: Session, form: Any) -> str:
        key = str(form.get("key", ""))
        action = str(form.get("action", ""))
        requests: dict[str, tuple[str, message.Message]] = {
            "pause": (
                "PauseSchedule",
                pb.PauseScheduleRequest(key=key, note=str(form.get("note", ""))),
            ),
            "resume": ("ResumeSchedule", pb.ResumeScheduleRequest(key=key)),
            "cancel": ("CancelSchedule", pb.CancelScheduleRequest(key=key)),
            "trigger": ("TriggerSchedule", pb.TriggerScheduleRequest(key=key)),
        }
        if action == "backfill":
            backfill = pb.BackfillScheduleRequest(key=key)
            backfill.start.FromMilliseconds(_time_ms(str(form.get("start", "")), "start"))
            backfill.end.FromMilliseconds(_time_ms(str(form.get("end", "")), "end"))
            requests["backfill"] = ("BackfillSchedule", backfill)
        if action not in requests:
            raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT, f"action: unknown {action!r}")
        method, call = requests[action]
        await self._call(session, method, call)
        return "/ui/schedule?" + urllib.parse.urlencode({"key": key})

    async def _dead_letters(self, request: web.Request, session: Session) -> web.StreamResponse:
        query = request.query
        window = pb.DeadLetterRange(key=query.get("key", ""))
        since, until = query.get("since", ""), query.get("until", "")
        if since:
            window.since.FromMilliseconds(_time_ms(since, "since"))
        if until:
            window.until.FromMilliseconds(_time_ms(until, "until"))
        reply = await self._call(
            session,
            "ListDeadLetters",
            pb.ListDeadLettersRequest(
                range=window, page_size=100, page_token=query.get("page", "")
            ),
        )
        letters = [
            {
                "key": d.key,
                "firing_id": d.firing_id,
                "delivery_id": d.delivery_id,
                "occurrence": words.when(_ms(d.occurrence_time)),
                "dead": words.when(_ms(d.dead_time)),
                "attempts": d.attempts,
                "status_code": d.last_status_code,
                "error": d.last_error,
                "redriven": _when(d, "redrive_time"),
            }
            for d in reply.dead_letters
        ]
        return self._render(
            "dead_letters.html",
            session,
            letters=letters,
            key=window.key,
            since=since,
            until=until,
            redriven=request.query.get("redriven", ""),
        )

    async def _redrive(self, session: Session, form: Any) -> str:
        ids = [str(v) for v in form.getall("firing_id", [])]
        window = pb.DeadLetterRange(key=str(form.get("key", "")))
        since = str(form.get("since", ""))
        if since:
            window.since.FromMilliseconds(_time_ms(since, "since"))
        reply = await self._call(
            session,
            "RedriveDeadLetters",
            pb.RedriveDeadLettersRequest(firing_ids=ids, range=window),
        )
        return "/ui/dead-letters?" + urllib.parse.urlencode(
            {
                "key": window.key,
                "since": since,
                "redriven": f"{reply.redriven} redriven, {reply.skipped} skipped",
            }
        )

    async def _cluster(self, request: web.Request, session: Session) -> web.StreamResponse:
        load = await self._calls.call(
            _CLUSTER, cluster_pb2.GetClusterLoadRequest(), session.metadata()
        )
        workers = [
            {
                "id": w.worker_id,
                "shards": w.shards,
                "due": f"{w.due_per_second:.1f}",
                "dispatch": f"{w.dispatch_per_second:.1f}",
                "lag_p99": f"{w.lag_p99_ms:.0f}",
                "in_flight": w.in_flight,
                "overdue": w.overdue,
                "reported": words.when(_ms(w.report_time)),
            }
            for w in load.workers
        ]
        shards: dict[str, list[int]] = {}
        epochs: dict[str, set[int]] = {}
        for owner in load.owners:
            shards.setdefault(owner.worker_id, []).append(owner.shard)
            epochs.setdefault(owner.worker_id, set()).add(owner.epoch)
        owners = [
            {
                "worker": worker,
                "shards": words.ranges(owned),
                "epochs": ", ".join(str(e) for e in sorted(epochs[worker])),
            }
            for worker, owned in sorted(shards.items())
        ]
        decision = None
        if load.HasField("scale_decision"):
            d = load.scale_decision
            decision = {
                "deployment": d.deployment,
                "current": d.current_replicas,
                "desired": d.desired_replicas,
                "reason": d.reason,
                "at": words.when(_ms(d.decide_time)),
                "by": d.decided_by,
                "changed": _when(d, "last_change_time", absent="never"),
            }
        return self._render(
            "cluster.html",
            session,
            decision=decision,
            workers=workers,
            owners=owners,
            shard_count=load.shard_count,
            shards_owned=load.shards_owned,
            due=f"{load.due_per_second:.1f}",
            lag_p99=f"{load.lag_p99_ms:.0f}",
        )

    # --- helpers -----------------------------------------------------------------------

    def _refused(self, session: Session, exc: CallFailed) -> web.Response:
        """A call the API refused: back to sign-in for a credential it no longer takes,
        else a page with its status and message."""
        if exc.code is grpc.StatusCode.UNAUTHENTICATED:
            raise web.HTTPSeeOther("/ui/login") from exc
        return self._render("error.html", session, status=exc.code.name, message=exc.details)

    async def _call(self, session: Session, method: str, request: message.Message) -> Any:
        return await self._calls.call(_SCHEDULER + method, request, session.metadata())

    def _render(self, name: str, session: Session | None, **values: Any) -> web.Response:
        page = self._templates.get_template(name).render(
            signed_in=session is not None and session.signed_in,
            who=(session.tenant or "tenant token") if session is not None else "",
            csrf=self._csrf.token(session) if session is not None else "",
            **values,
        )
        return web.Response(
            text=page,
            content_type="text/html",
            headers={
                "Cache-Control": "no-store",
                "Content-Security-Policy": "default-src 'self'; form-action 'self'; "
                "frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff",
            },
        )


_STATES = ("ACTIVE", "PAUSED", "COMPLETED", "CANCELLED")


def _same_origin(request: web.Request) -> None:
    """Refuses a form posted from another site (the browser names it in `Origin`),
    besides the CSRF token and the SameSite cookies."""
    origin = request.headers.get("Origin")
    if origin is not None and urllib.parse.urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(text="cross-origin form refused")


def _session(request: web.Request) -> Session:
    return Session(request.cookies.get(TOKEN_COOKIE, ""), request.cookies.get(TENANT_COOKIE, ""))


def _ms(stamp: Any) -> int:
    return int(stamp.ToMilliseconds())


def _when(message: Any, name: str, absent: str = "") -> str:
    """A message's optional timestamp field in words; `absent` when it is not set."""
    return words.when(_ms(getattr(message, name))) if message.HasField(name) else absent


def _time_ms(text: str, field: str) -> int:
    try:
        return durations.parse_time_ms(text)
    except ValueError as exc:
        raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {exc}") from exc


def _schedule_row(s: pb.Schedule) -> dict[str, Any]:
    outcome = pb.Outcome.Name(s.last_outcome) if s.last_outcome else ""
    return {
        "key": s.key,
        "link": "/ui/schedule?" + urllib.parse.urlencode({"key": s.key}),
        "trigger": words.trigger(convert.spec_from_pb(s.spec).trigger),
        "state": pb.ScheduleState.Name(s.state),
        "next": _when(s, "next_fire_time"),
        "last": _when(s, "last_fire_time"),
        "outcome": outcome.removeprefix("OUTCOME_").lower() if outcome else "",
        "fired": s.fired_count,
        "note": s.pause_note,
    }


def _execution_row(e: pb.Execution) -> dict[str, Any]:
    lag = _ms(e.start_time) - _ms(e.due_time) if e.HasField("start_time") else None
    return {
        "started": _when(e, "start_time"),
        "attempt": e.attempt,
        "outcome": pb.Outcome.Name(e.outcome).removeprefix("OUTCOME_").lower(),
        "status_code": e.status_code or "",
        "lag_ms": lag if lag is not None else "",
        "delivery_id": e.delivery_id,
        "error": e.error,
    }


def _target(spec: pb.ScheduleSpec) -> str:
    if spec.HasField("kafka"):
        return f"Kafka topic {spec.kafka.topic}"
    return f"{spec.http.method or 'POST'} {spec.http.url}"
