"""The diff of a changed story (events/diff.py): characters added and removed, a changed title, and
correction or update notices in the languages documented in docs/events.md."""

from __future__ import annotations

import pytest

from distributed_crawler.events.diff import FINE_DIFF_CHARS, has_correction, story_diff


def test_counts_characters_not_paragraphs() -> None:
    old = "The mayor spoke on Monday.\nThe council voted."
    typo = story_diff("T", old, "T", "The mayor spoke on Tuesday.\nThe council voted.")
    assert typo["text_added"] + typo["text_removed"] <= 8 and not typo["title_changed"]  # Monday -> Tuesday
    grown = story_diff("T", old, "T", old + "\nA third paragraph.")
    assert (grown["text_added"], grown["text_removed"]) == (len("A third paragraph."), 0)
    cut = story_diff("T", old, "T", "The council voted.")
    assert (cut["text_added"], cut["text_removed"]) == (0, len("The mayor spoke on Monday."))
    assert story_diff("T", old, "T", old) == {
        "title_changed": False,
        "text_added": 0,
        "text_removed": 0,
        "correction": False,
    }
    assert (
        story_diff(None, None, "New", "text")["title_changed"] and story_diff(None, None, None, "")["text_added"] == 0
    )


def test_long_replaced_passages_are_counted_whole() -> None:
    old, new = "a" * FINE_DIFF_CHARS, "b" * FINE_DIFF_CHARS
    assert story_diff("T", old, "T", new)[("text_added")] == FINE_DIFF_CHARS  # bounded work, whole passage


@pytest.mark.parametrize(
    "notice",
    [
        "Correction: An earlier version of this story misstated the date.",
        "Update (14:05): Police have named the victim.",
        "UPDATED: more details",
        "Editor's note: this story has been amended.",
        "This article has been updated with a statement from the council.",
        "Mise à jour : le bilan s'alourdit.",
        "Rectificatif : une version précédente de cet article indiquait 12 morts.",
        "Cet article a été corrigé.",
        "Korrektur: In einer früheren Fassung dieses Artikels hieß es ...",
        "Aktualisierung: Die Polizei hat ...",
        "Fe de errores: una versión anterior de esta noticia ...",
        "Actualización: el gobierno confirmó ...",
        "Rettifica: una precedente versione di questo articolo ...",
        "Questo articolo è stato aggiornato.",
        "Correção: uma versão anterior desta reportagem ...",
        "Atualização: a polícia ...",
        "Correctie: in een eerdere versie van dit artikel ...",
    ],
)
def test_correction_notices_are_recognised(notice: str) -> None:
    assert has_correction(notice)
    assert story_diff("T", "Body.", "T", "Body.\n" + notice)["correction"]


@pytest.mark.parametrize(
    "text",
    [
        "The update came late, officials said.",
        "Updates to the timetable were published.",
        "She asked for a correction of the record in court.",
        "Le gouvernement a annoncé une mise à jour du logiciel.",
    ],
)
def test_ordinary_sentences_are_not_notices(text: str) -> None:
    assert not has_correction(text)


def test_a_notice_already_there_does_not_count_again() -> None:
    old = "Body.\nCorrection: the date was wrong."
    assert not story_diff("T", old, "T", old + "\nMore reporting.")["correction"]
