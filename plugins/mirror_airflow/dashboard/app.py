"""The dashboard's FastAPI app, mounted by the Airflow api-server at /mirror-dashboard (see the plugin in
plugins/mirror_dashboard_plugin.py).

Airflow does not protect a plugin's endpoints: every route here depends on Airflow's own `get_user`
(the UI's `_token` cookie, or an `Authorization: Bearer` token from POST /auth/token), so an anonymous
request gets 401 (an invalid token 403), and on the auth manager's DAG permission: a mirror is shown
only to users who may read its lifecycle DAG `mirror__NAME`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse

from airflow.api_fastapi.core_api.security import GetUserDep
from mirror_airflow.dashboard.gather import Dashboard, lifecycle_dag_id
from mirror_airflow.dashboard.pages import mirror_page, overview_page, refused_page

URL_PREFIX = "/mirror-dashboard"

CanRead = Callable[[str], bool]  # mirror name -> may the user read it


def can_read(user: GetUserDep) -> CanRead:
    """The logged-in user's read permission on a mirror = on its lifecycle DAG (auth manager's rules)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    manager = get_auth_manager()

    def check(name: str) -> bool:
        return manager.is_authorized_dag(method="GET", details=DagDetails(id=lifecycle_dag_id(name)), user=user)

    return check


@lru_cache(maxsize=1)
def default_dashboard() -> Dashboard:
    from mirror_airflow.dashboard.sources import real_edges
    from mirror_airflow.dashboard.store import HistoryStore

    return Dashboard(real_edges(), HistoryStore())


def create_app(dashboard: Callable[[], Dashboard] = default_dashboard) -> FastAPI:
    app = FastAPI(title="Kafka mirror dashboard", docs_url=None, redoc_url=None, openapi_url=None)

    def base(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException):
        # Pages answer a person with a login link; the JSON API answers as Airflow's API does.
        if request.url.path.startswith(f"{base(request)}/api/") or exc.status_code not in (401, 403):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        login = f"/auth/login?{urlencode({'next': request.url.path})}"
        return HTMLResponse(refused_page(login), status_code=exc.status_code)

    def readable(name: str, allowed: CanRead) -> None:
        # Permission first: a user without it learns nothing, not even whether the mirror exists.
        if not allowed(name):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"no read access to DAG {lifecycle_dag_id(name)}")
        if name not in dashboard().mirror_names():
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no mirror named {name!r} in the spec")

    def overview(allowed: CanRead):
        board = dashboard()
        return board.overview({n for n in board.mirror_names() if allowed(n)})

    @app.get("/", response_class=HTMLResponse)
    def overview_html(request: Request, allowed: CanRead = Depends(can_read)):
        return overview_page(overview(allowed), base(request))

    @app.get("/api/mirrors")
    def overview_json(allowed: CanRead = Depends(can_read)):
        return {"mirrors": [view.to_dict() for view in overview(allowed)]}

    @app.get("/mirrors/{name}", response_class=HTMLResponse)
    def mirror_html(name: str, request: Request, allowed: CanRead = Depends(can_read)):
        readable(name, allowed)
        return mirror_page(dashboard().mirror(name), base(request))

    @app.get("/api/mirrors/{name}")
    def mirror_json(name: str, allowed: CanRead = Depends(can_read)):
        readable(name, allowed)
        return dashboard().mirror(name).to_dict()

    @app.get("/mirrors/{name}/report", response_class=HTMLResponse)
    def report_html(name: str, allowed: CanRead = Depends(can_read)):
        readable(name, allowed)
        board = dashboard()
        spec = next(m for m in board.edges.mirrors() if m.name == name)
        report = board.edges.report(spec)
        if report is None or report.html_path is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"mirror {name!r} has no HTML verification report yet")
        return HTMLResponse(Path(report.html_path).read_text(encoding="utf-8"))

    return app
