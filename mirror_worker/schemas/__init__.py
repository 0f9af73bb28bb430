"""Schemas: the schema registry edge (`registry`), the copy of subjects between registries and its id map
(`sync`), the byte-level Confluent framing (`wire_format`) and which keys and values carry it (`framing`).
The worker's per-source gate that rewrites schema ids on the hot path is `engine.schema_gate`.
"""
