"""Configuration: the YAML spec (`spec`) and MirrorMaker's flags (`commands.cli`) both end in one validated
model (`model.MirrorConfig`, pydantic, unknown keys rejected); Java `.properties` files (`properties`) and
their TLS/SASL keys and `${file:…}` secrets (`security`) become checked librdkafka settings (`librdkafka`,
also `settings_from_connection` for Airflow); `membership` is a worker slot's static group membership.
"""
