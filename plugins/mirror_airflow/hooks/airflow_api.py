"""The Airflow REST API calls of the operators (is a DAG paused, pause/unpause it) from an `http`
connection (`airflow_api` by default): host (with scheme, or `schema` as the scheme), port,
login/password exchanged for a token at `/auth/token`. Plain http:// (also the default when neither the host
nor `schema` names a scheme) off loopback sends that password in clear: it is refused unless the
connection's extra says `"allow-insecure": ["http-api"]` (mirror_worker/config/posture.py)."""

from __future__ import annotations

from airflow.sdk import BaseHook

from mirror_worker.api import ConfigError, allowed_insecure, check_url


class AirflowApi:
    """A small client of Airflow's public REST API (v2): token, `GET`/`PATCH /api/v2/dags/{id}`."""

    def __init__(self, base_url: str, username: str | None, password: str | None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.username, self.password, self.timeout_s = username, password, timeout_s
        self._token: str | None = None

    @classmethod
    def from_connection(cls, conn) -> "AirflowApi":
        host = conn.host or "127.0.0.1"
        base = host if "://" in host else f"{conn.schema or 'http'}://{host}"
        if conn.port:
            base = f"{base}:{conn.port}"
        where = f"Airflow connection {getattr(conn, 'conn_id', None)!r}"
        check_url(base, "http-api", allowed_insecure((conn.extra_dejson or {}).get("allow-insecure"), where), where)
        return cls(base, conn.login, conn.password)

    def _auth_headers(self, refresh: bool = False) -> dict[str, str]:
        import requests

        if self.username is None:
            # No credentials: a token exists only when the auth manager makes everyone admin.
            if self._token is None or refresh:
                response = requests.get(f"{self.base_url}/auth/token", timeout=self.timeout_s)
                self._token = response.json().get("access_token", "") if response.ok else ""
            return {"Authorization": f"Bearer {self._token}"} if self._token else {}
        if self._token is None or refresh:
            response = requests.post(f"{self.base_url}/auth/token", timeout=self.timeout_s,
                                     json={"username": self.username, "password": self.password or ""})
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return {"Authorization": f"Bearer {self._token}"}

    def _request(self, method: str, path: str, **kwargs):
        import requests

        response = requests.request(method, f"{self.base_url}{path}", headers=self._auth_headers(),
                                    timeout=self.timeout_s, **kwargs)
        if response.status_code in (401, 403):
            response = requests.request(method, f"{self.base_url}{path}", headers=self._auth_headers(refresh=True),
                                        timeout=self.timeout_s, **kwargs)
        response.raise_for_status()
        return response.json()

    def authenticate(self) -> None:
        """Fetch a fresh token (raises when the API refuses the credentials)."""
        self._auth_headers(refresh=True)

    def is_paused(self, dag_id: str) -> bool:
        return bool(self._request("GET", f"/api/v2/dags/{dag_id}")["is_paused"])

    def set_paused(self, dag_id: str, paused: bool) -> bool:
        return bool(self._request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": paused})["is_paused"])


class AirflowApiHook(BaseHook):
    """`AirflowApi` from an Airflow connection."""

    conn_name_attr = "airflow_api_conn_id"
    default_conn_name = "airflow_api"
    conn_type = "http"
    hook_name = "Airflow REST API (DAG pause state)"

    def __init__(self, airflow_api_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.airflow_api_conn_id = airflow_api_conn_id

    def get_conn(self) -> AirflowApi:
        return AirflowApi.from_connection(self.get_connection(self.airflow_api_conn_id))

    def test_connection(self) -> tuple[bool, str]:
        try:
            api = self.get_conn()
            api.authenticate()
        except Exception as exc:
            return False, f"{exc.__class__.__name__}: {exc}"
        return True, f"token obtained from {api.base_url}"


def api_from_connection(conn_id: str, log) -> AirflowApi | None:
    """The API client, or None (one warning) when the connection is not defined."""
    try:
        return AirflowApiHook(conn_id).get_conn()
    except ConfigError:
        raise  # defined but refused (e.g. http:// without the opt-in): not a reason to run unchecked
    except Exception as exc:  # AirflowNotFoundException (class location differs across Airflow versions)
        log.warning("Airflow connection %r not defined (%s): the pause check is off", conn_id, exc.__class__.__name__)
        return None
