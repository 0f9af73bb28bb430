"""Kafka clients, one room: every client of the three planes is built by `factory`; the worker's callbacks
(errors, statistics, logs) and a bounded first contact (`callbacks`); what the clients see of their clusters
(`health`); consumer-group admin calls in a child process that may die alone (`coordinator_admin`,
`coordinator_child`); consumer-group look-ups (`groups`); a partition's log start and end as the mirror's
consumer sees it (`log_ends`); a record's headers, read once (`headers`: a header name that is not UTF-8).
"""
