"""Triggers: `lag.MirrorLagTrigger`, the lag sensor's sampling in the triggerer while its window fills.
"""
