"""NeMo Gym's audio side channel, for the `vllm` model function: the Responses API has no
audio content, so NeMo Gym's audio datasets (`asr_with_pc`) carry a row's audio in
`responses_create_params.metadata`, and NeMo Gym's vLLM adapter splices it into the Chat
Completions request. Done the same way here, so such a row sends the model its audio:

- exactly one of `audio_data` (a `data:audio/<format>;base64,...` URI), `audio_path` (a
  file) or `audio_paths` (a JSON list of files), each file read and inlined as a data URI
  of its extension's format;
- the clips become `audio_url` parts placed before the text of the last user message (a
  user message of the clips alone where there is none).

A relative path is refused: NeMo Gym resolves it against its adapter's `audio_root`, a
setting GymBus's adapter does not have.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from gymbus.schemas import BadRequest

__all__ = ["with_audio"]

_KEYS = ("audio_data", "audio_path", "audio_paths")
_FORMATS = {".wav": "wav", ".flac": "flac", ".mp3": "mpeg", ".m4a": "mp4", ".ogg": "ogg", ".opus": "opus"}
"""A file's extension → its data URI's subtype (as NeMo Gym's table: an unknown one is refused,
not guessed, since vLLM's decoder picks its backend by it)."""


def with_audio(request: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """`request` (Chat Completions) with the audio `metadata` names spliced in; unchanged
    where it names none."""
    present = [key for key in _KEYS if metadata.get(key)]
    if not present:
        return request
    if len(present) > 1:
        named = " and ".join(present)
        raise BadRequest(f"metadata names audio under {named}: give exactly one of {', '.join(_KEYS)}")
    if present[0] == "audio_data":
        urls = [str(metadata["audio_data"])]
    elif present[0] == "audio_path":
        urls = [_data_uri(str(metadata["audio_path"]))]
    else:
        urls = [_data_uri(str(path)) for path in _paths(metadata["audio_paths"])]
    clips = [{"type": "audio_url", "audio_url": {"url": url}} for url in urls]
    messages = [dict(message) for message in request.get("messages", [])]
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            text = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            message["content"] = clips + text
            break
    else:
        messages.append({"role": "user", "content": clips})
    return {**request, "messages": messages}


def _paths(value: Any) -> list[Any]:
    if isinstance(value, str):  # metadata values are strings: a list arrives as its JSON
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, list):
        raise BadRequest(f"metadata.audio_paths must be a list of files, not {value!r:.80}")
    return value


def _data_uri(path: str) -> str:
    file = Path(path)
    if not file.is_absolute():
        raise BadRequest(f"audio file {path!r} is relative: give an absolute path (GymBus has no audio_root)")
    kind = _FORMATS.get(file.suffix.lower())
    if kind is None:
        known = ", ".join(_FORMATS)
        raise BadRequest(f"audio file {path!r}: unknown format {file.suffix!r} (known: {known})")
    try:
        encoded = base64.b64encode(file.read_bytes()).decode("ascii")
    except OSError as exc:
        raise BadRequest(f"audio file {path!r} cannot be read: {exc.strerror}") from None
    return f"data:audio/{kind};base64,{encoded}"
