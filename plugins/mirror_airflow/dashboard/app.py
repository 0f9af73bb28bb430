"""The dashboard's FastAPI app, mounted by the Airflow api-server at /mirror-dashboard (see the plugin in
plugins/mirror_dashboard_plugin.py).

Airflow does not protect a plugin's endpoints: every route here depends on Airflow's own `get_user`
(the UI's `_token` cookie, or an `Authorization: Bearer` token from POST /auth/token), so an anonymous
request gets 401 (an invalid token 403), and on the auth manager's DAG permissions, each part of a page on
the DAG it belongs to: a mirror is shown only to users who may read its lifecycle DAG `mirror__NAME`; its lag
sensor's verdicts only with read access to `mirror__NAME__lag`, its verification report only with read
access to `mirror__NAME__verify`, and the halt reasons read from run_worker's task log only with access to
`mirror__NAME`'s task logs (Airflow's TASK_LOGS permission). What is left out is said on the page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse

from airflow.api_fastapi.core_api.security import GetUserDep
from mirror_airflow.dag_ids import lag_dag_id, lifecycle_dag_id, verify_dag_id
from mirror_airflow.dashboard.gather import Access, Dashboard
from mirror_airflow.dashboard.pages import mirror_page, overview_page, refused_page

URL_PREFIX = "/mirror-dashboard"


class Permissions:
    """The logged-in user's permissions on a mirror's DAGs (auth manager's rules), each asked once per request."""

    def __init__(self, allowed: Callable[[str, bool], bool]) -> None:
        self.allowed = allowed  # (dag id, task logs?) -> may the user read it
        self._known: dict[tuple[str, bool], bool] = {}

    def _may(self, dag_id: str, logs: bool = False) -> bool:
        if (dag_id, logs) not in self._known:
            self._known[(dag_id, logs)] = self.allowed(dag_id, logs)
        return self._known[(dag_id, logs)]

    def can_read(self, name: str) -> bool:
        """May the user see the mirror at all = read its lifecycle DAG."""
        return self._may(lifecycle_dag_id(name))

    def access(self, name: str) -> Access:
        return Access(lag=self._may(lag_dag_id(name)), verify=self._may(verify_dag_id(name)),
                      logs=self._may(lifecycle_dag_id(name), logs=True))


def permissions(user: GetUserDep) -> Permissions:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    manager = get_auth_manager()

    def allowed(dag_id: str, logs: bool) -> bool:
        return manager.is_authorized_dag(method="GET", details=DagDetails(id=dag_id), user=user,
                                         access_entity=DagAccessEntity.TASK_LOGS if logs else None)

    return Permissions(allowed)


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

    def readable(name: str, user: Permissions) -> None:
        # Permission first: a user without it learns nothing, not even whether the mirror exists.
        if not user.can_read(name):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"no read access to DAG {lifecycle_dag_id(name)}")
        if name not in dashboard().mirror_names():
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no mirror named {name!r} in the spec")

    def overview(user: Permissions):
        board = dashboard()
        return board.overview({n for n in board.mirror_names() if user.can_read(n)}, user.access)

    @app.get("/", response_class=HTMLResponse)
    def overview_html(request: Request, user: Permissions = Depends(permissions)):
        return overview_page(overview(user), base(request))

    @app.get("/api/mirrors")
    def overview_json(user: Permissions = Depends(permissions)):
        return {"mirrors": [view.to_dict() for view in overview(user)]}

    @app.get("/mirrors/{name}", response_class=HTMLResponse)
    def mirror_html(name: str, request: Request, user: Permissions = Depends(permissions)):
        readable(name, user)
        return mirror_page(dashboard().mirror(name, user.access(name)), base(request))

    @app.get("/api/mirrors/{name}")
    def mirror_json(name: str, user: Permissions = Depends(permissions)):
        readable(name, user)
        return dashboard().mirror(name, user.access(name)).to_dict()

    @app.get("/mirrors/{name}/report", response_class=HTMLResponse)
    def report_html(name: str, user: Permissions = Depends(permissions)):
        readable(name, user)
        if not user.access(name).verify:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"no read access to DAG {verify_dag_id(name)}")
        board = dashboard()
        spec = next(m for m in board.edges.mirrors() if m.name == name)
        report = board.edges.report(spec)
        if report is None or report.html_path is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"mirror {name!r} has no HTML verification report yet")
        return HTMLResponse(Path(report.html_path).read_text(encoding="utf-8"))

    return app
