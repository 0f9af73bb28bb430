#!/usr/bin/env bash
# docker-compose.yaml's airflow-init: migrate the metadata database and set the passwords of the admin and of
# mirror-tasks, the tasks' API user (SimpleAuthManager reads them from the password file that every Airflow
# container mounts).
set -euo pipefail
airflow db migrate
password_file="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?}"
mkdir -p "$(dirname "$password_file")"
python - "$password_file" <<'PY'
import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump({os.environ.get("AIRFLOW_ADMIN_USER", "admin"): os.environ["AIRFLOW_ADMIN_PASSWORD"],
               "mirror-tasks": os.environ["AIRFLOW_TASKS_PASSWORD"]}, f)
PY
echo "airflow-init: database migrated; log in as ${AIRFLOW_ADMIN_USER:-admin}"
