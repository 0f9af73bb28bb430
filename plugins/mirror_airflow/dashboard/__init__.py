"""The mirror dashboard shown inside the Airflow UI (see plugins/README.md, "Dashboard").

    store.py     bounded SQLite history: lag samples per partition, lag-sensor verdicts
    sources.py   the I/O edges: Airflow's DB (paused DAGs), worker metrics, verification reports
    gather.py    pure assembly of what a page shows from those inputs (unit-tested with fakes)
    chart.py     server-side SVG line charts (no JavaScript, nothing fetched from elsewhere)
    pages.py     HTML of the overview and of one mirror
    app.py       the FastAPI app the api-server mounts, every route behind Airflow's authentication
"""
