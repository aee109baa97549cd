"""The console's web application: pages, the JSON API under ``/api/`` and ``/metrics``, behind basic auth.

The pages are small HTML shells; ``static/console.js`` fills them from the JSON API, so everything a page
shows is also available as JSON. Assets (Chart.js included) are served from the package: no CDN.
Swagger UI is not served (it loads from a CDN); the OpenAPI document is at ``/api/openapi.json`` and in
``docs/openapi.json``.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from autooptimize import __version__
from autooptimize.config import Settings
from autooptimize.console import schemas
from autooptimize.console.auth import REALM, BasicAuth
from autooptimize.console.metrics import metrics_text
from autooptimize.errors import (
    ActionNotFound,
    AutoOptimizeError,
    ConfigError,
    InvalidArgument,
    ServiceUnavailable,
    TableNotFound,
)
from autooptimize.services import overview
from autooptimize.services.explain import explain as explain_table
from autooptimize.services.notify import notify as notify_table
from autooptimize.storage.readmodel import HistoryFilter
from scheduler.orient import queue_status
from scheduler.tenants import tenant_shares
from scheduler.wake import publish

STATIC = Path(__file__).parent / "static"
PAGES = {"tables": "Tables", "table": "Table", "actions": "Actions", "action": "Action", "queues": "Queues",
         "explain": "Explain"}
_STATUS = ((ActionNotFound, 404), (TableNotFound, 404), (InvalidArgument, 400), (ConfigError, 400),
           (ServiceUnavailable, 503))


def create_app(settings: Settings, user: str, password: str) -> FastAPI:
    """The console for ``settings``; every request must carry ``user``/``password`` as basic auth."""
    app = FastAPI(title="autooptimize console", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json",
                  description="What autooptimize is doing: tables and their File Size Entropy, actions with "
                              "their cost, the dispatch backlog. Every route requires HTTP basic auth.")
    app.include_router(api_router(settings))
    app.include_router(page_router())

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        body, content_type = metrics_text(settings)
        return Response(body, media_type=content_type)

    @app.exception_handler(AutoOptimizeError)
    async def our_errors(_request: Request, exc: AutoOptimizeError) -> JSONResponse:
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
        return JSONResponse({"detail": str(exc), "error": type(exc).__name__}, status_code=status)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _document_auth(app)
    app.add_middleware(BasicAuth, user=user, password=password)
    return app


def api_router(settings: Settings) -> APIRouter:
    api = APIRouter(prefix="/api", tags=["api"])

    @api.get("/tables", response_model=list[schemas.TableLine], summary="Tracked tables and their health")
    def tables() -> list[dict[str, Any]]:
        return overview.tables_overview(settings)

    @api.get("/tables/{table}", response_model=schemas.TableDetail,
             summary="Partitions ranked by MSE, file-size histograms, latest actions")
    def table(table: str) -> dict[str, Any]:
        return overview.table_detail(settings, table)

    @api.get("/tables/{table}/explain", response_model=dict[str, Any],
             summary="What optimize would do to each partition and why (plans on raw bytes; changes nothing)")
    def explain(table: str, partition: str | None = None) -> dict[str, Any]:
        return explain_table(settings, table, partition, None, spark=None)

    @api.get("/actions", response_model=schemas.ActionPage, summary="Action history, newest first")
    def actions(table: str | None = None, kind: str | None = None, state: str | None = None,
                trigger: str | None = None, partition: str | None = Query(None, description="partition key"),
                limit: int = Query(50, ge=1, le=overview.MAX_LIMIT), offset: int = Query(0, ge=0)) -> dict[str, Any]:
        where = HistoryFilter(table=table or None, kind=kind or None, state=state or None, trigger=trigger or None,
                              partition=partition or None, limit=limit, offset=offset)
        return overview.action_list(settings, where)

    @api.get("/actions/{action_id}", response_model=schemas.ActionDetail,
             summary="One action: cost, phases, before/after, options and audit trail")
    def action(action_id: str) -> dict[str, Any]:
        return overview.action_detail(settings, action_id)

    @api.get("/actions/{action_id}/audit", response_model=list[schemas.AuditRecord],
             summary="An action's audit trail, oldest first")
    def audit(action_id: str) -> list[dict[str, Any]]:
        return list(overview.action_detail(settings, action_id)["audit"])

    @api.get("/actions/{action_id}/progress", response_model=schemas.Progress,
             summary="Where a running action is")
    def progress(action_id: str) -> dict[str, Any]:
        return overview.action_progress(settings, action_id)

    @api.post("/notify", response_model=schemas.NotifyResult,
              summary="A tracked table has a new snapshot: wake the listener holding its shard at once")
    def notify(body: schemas.NotifyRequest) -> dict[str, Any]:
        return notify_table(settings, body.table, body.snapshot_id, wake=lambda t, s: publish(settings, t, s))

    @api.get("/queues", response_model=schemas.QueueStatus,
             summary="Backlog per priority class and table, its trend, and whether to add actors")
    def queues() -> dict[str, Any]:
        return queue_status(settings)

    @api.get("/tenants", response_model=schemas.TenantShares,
             summary="Per tenant: weight, target share, dispatches and busy seconds in the window, backlog")
    def tenants() -> dict[str, Any]:
        return tenant_shares(settings)

    return api


def page_router() -> APIRouter:
    pages = APIRouter(include_in_schema=False)

    @pages.get("/")
    def home() -> RedirectResponse:
        return RedirectResponse("/tables")

    @pages.get("/tables", response_class=HTMLResponse)
    def tables_page() -> str:
        return render("tables")

    @pages.get("/tables/{table}", response_class=HTMLResponse)
    def table_page(table: str) -> str:
        return render("table", table)

    @pages.get("/actions", response_class=HTMLResponse)
    def actions_page() -> str:
        return render("actions")

    @pages.get("/actions/{action_id}", response_class=HTMLResponse)
    def action_page(action_id: str) -> str:
        return render("action", action_id)

    @pages.get("/explain/{table}", response_class=HTMLResponse)
    def explain_page(table: str) -> str:
        return render("explain", table)

    @pages.get("/queues", response_class=HTMLResponse)
    def queues_page() -> str:
        return render("queues")

    return pages


def render(page: str, arg: str = "") -> str:
    """The HTML shell of ``page``; console.js renders it from the API (``arg``: the table or action id)."""
    title = f"{PAGES[page]} {arg}".strip()
    template = (STATIC / "page.html").read_text()
    return (template.replace("{{title}}", html.escape(title)).replace("{{page}}", page)
            .replace("{{arg}}", html.escape(arg, quote=True)).replace("{{version}}", __version__))


def _document_auth(app: FastAPI) -> None:
    """Name basic auth in the OpenAPI document (the middleware enforces it on every route)."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original()
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["basic"] = {
                "type": "http", "scheme": "basic", "description": f"realm {REALM}: AO_CONSOLE_USER / "
                "AO_CONSOLE_PASSWORD (generated into $AO_HOME/console-credentials when unset)"}
            schema["security"] = [{"basic": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
