"""What changed between two versions of a story: the `diff` of a `changed` event (docs/events.md).

`story_diff(old_title, old_text, new_title, new_text)` -> {"title_changed", "text_added",
"text_removed", "correction"}: characters added and removed (a paragraph-level diff, refined to
characters inside short replaced passages, so an edited sentence counts its edit, not its
paragraph), and whether the text the new version added holds a correction or update notice
(`CORRECTION_PATTERNS`, English, French, German, Spanish, Italian, Portuguese and Dutch).
Pure functions: bounded work whatever the texts (long replaced passages are counted whole).
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Any

#: A replaced passage up to this many characters (both sides) is compared character by character.
FINE_DIFF_CHARS = 4000

# A notice opens a paragraph ("Correction: ...", "Update (12:30): ...") or says what an earlier
# version got wrong. Case-insensitive; only the paragraphs the new version added are searched.
_OPENERS = (
    r"corrections?|correction appended|clarification|editor'?s note|update[sd]?|updated"  # en
    r"|rectificatif|correctif|mise à jour|précision|note de la rédaction"  # fr
    r"|korrektur|berichtigung|richtigstellung|aktualisierung|aktualisiert|update|anmerkung der redaktion"  # de
    r"|corrección|fe de erratas|fe de errores|actualización|actualizado|nota del editor"  # es
    r"|correzione|rettifica|aggiornamento|aggiornato|nota della redazione"  # it
    r"|correção|errata|atualização|atualizado|nota do editor|nota da redação"  # pt
    r"|correctie|rectificatie|herstel|bijgewerkt|noot van de redactie"  # nl
)
CORRECTION_PATTERNS = (
    re.compile(rf"^\W{{0,3}}(?:{_OPENERS})\b\s*(?:\([^)]{{0,40}}\))?\s*[:—–-]", re.IGNORECASE | re.MULTILINE),
    re.compile(
        r"an earlier version of this (?:story|article|report|post)"
        r"|this (?:story|article|report) (?:has been|was) (?:updated|corrected|amended)"
        r"|une (?:version|précédente version) (?:précédente )?de cet article"
        r"|cet article a été (?:mis à jour|modifié|corrigé|rectifié)"
        r"|in einer (?:früheren|älteren|vorherigen) (?:version|fassung) (?:dieses|des) (?:artikels|textes|beitrags)"
        r"|dieser (?:artikel|text|beitrag) wurde (?:aktualisiert|korrigiert|berichtigt)"
        r"|una versión anterior de (?:este|esta) (?:artículo|nota|noticia|información)"
        r"|(?:este|esta) (?:artículo|nota|noticia) (?:ha sido|fue) (?:actualizad|corregid)[oa]"
        r"|una (?:precedente|prima) versione di questo articolo"
        r"|questo articolo è stato (?:aggiornato|corretto|modificato)"
        r"|uma versão anterior (?:deste|desta) (?:artigo|reportagem|matéria|notícia)"
        r"|(?:este|esta) (?:artigo|reportagem|matéria|notícia) foi (?:atualizad|corrigid)[oa]"
        r"|in een eerdere versie van dit (?:artikel|bericht)"
        r"|dit (?:artikel|bericht) is (?:bijgewerkt|aangepast|gecorrigeerd)",
        re.IGNORECASE,
    ),
)


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.splitlines() if p.strip()]


def _counted(old: list[str], new: list[str]) -> tuple[int, int, list[str]]:
    """(characters added, characters removed, the new paragraphs that were added or replaced)."""
    added = removed = 0
    fresh: list[str] = []
    for op, a0, a1, b0, b1 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        before, after = "\n".join(old[a0:a1]), "\n".join(new[b0:b1])
        fresh += new[b0:b1]
        if op == "replace" and len(before) + len(after) <= FINE_DIFF_CHARS:
            for fine, x0, x1, y0, y1 in SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
                if fine != "equal":
                    removed += x1 - x0
                    added += y1 - y0
        else:
            removed += len(before)
            added += len(after)
    return added, removed, fresh


def has_correction(added_text: str) -> bool:
    """Whether text a new version added holds a correction or update notice."""
    return any(pattern.search(added_text) for pattern in CORRECTION_PATTERNS)


def story_diff(old_title: Any, old_text: Any, new_title: Any, new_text: Any) -> dict[str, Any]:
    """The `diff` of a changed story (None fields read as empty)."""
    added, removed, fresh = _counted(_paragraphs(str(old_text or "")), _paragraphs(str(new_text or "")))
    return {
        "title_changed": (old_title or "") != (new_title or ""),
        "text_added": added,
        "text_removed": removed,
        "correction": has_correction("\n".join(fresh)),
    }
