"""dr/offset_translation.py without a broker: a source group's offsets that do not come in time are a one-line
TranslationError (exit 1), not a traceback."""

from __future__ import annotations

import pytest

from mirror_worker.dr.offset_translation import TranslationError, group_offsets


class UnansweredAdmin:
    """An admin client whose cluster never answers: the future's wait runs out."""

    class Future:
        def result(self, timeout=None):
            raise TimeoutError()

    def list_consumer_group_offsets(self, requests, request_timeout=None):
        return {request.group_id: self.Future() for request in requests}


def test_a_group_read_without_an_answer_is_a_translation_error():
    with pytest.raises(TranslationError, match=r"^cannot read group 'g' on source 'east': no answer within 0.5s$"):
        group_offsets(UnansweredAdmin(), "g", "source 'east'", timeout=0.5)
