"""The copy engine, the worker's top library layer: `worker.MirrorWorker` wires the parts and runs the loop;
`consume` takes what a consumer holds without waiting for a batch to fill, `hot_path` routes and produces,
`delivery` and `halts` handle a refused record, `backpressure` bounds what is in flight, `commits` flushes and
commits (`ledger` is the only place positions move), `assignment` decides each partition's start on a rebalance
(`data_loss`), `streams` and `source_stream` hold one consumer per source cluster, `schema_gate` rewrites schema
ids per source, `topic_management` keeps the destination topics in step, `housekeeping` runs the ACL and group
offset syncs and the heartbeats, `stalls` reports partitions that stop moving, `run_state` the stop request and
fatal error, and `catchup_lease` hands a mirror to the Spark catch-up and back.
"""
