"""Sensors: `lag.MirrorLagSensor` measures a mirror's per-partition lag and heartbeat latency and judges a
sliding window (the rules live in `mirror_airflow.lag`).
"""
