"""The command layer of `python -m mirror_worker`: `main` dispatches the subcommands (`sync_schemas`,
`translate_offsets`, `sync_acls`, `sync_group_offsets`) and MirrorMaker's classic flags (`cli`, into
`config.model.MirrorConfig`) to the `runner` (signals, `--num.streams` worker processes); `base` holds the
exit codes (0 done or clean stop, 1 fatal runtime error, 2 bad input), `fail` and the one-line argument
parser. Library modules never import this package (nor `__main__.py`): the commands call the library and
turn its exceptions into exit codes.
"""
