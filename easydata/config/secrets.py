"""What a secret reads as wherever a config, a manifest, a dead letter or an error shows it.

Two kinds: the hub token (`save.hub_token`, `PipelineConfig.to_dict`) and the credentials a URL carries. An
input read over HTTP or from a presigned link holds them in its address: the login of
`https://user:password@host/...` (or a token as the user, `https://TOKEN@host/...`) and the values of its
query (`?X-Amz-Signature=...`, GCS's `X-Goog-Signature`, an Azure SAS `sig`, a plain `?token=`). A run's
manifest and dead letters name their inputs and are published with the shards (`push_to_hub`), so a URL's
login and every query value read as `REDACTED` there (`redact_url`), and in the command's error lines
(`redact_urls`). Which query values are secret differs by service, so none is kept. The run itself reads
the address as given.

Example:
    redact_url("https://me:pw@host/d.jsonl?sig=abc&x=1")  # 'https://<redacted>@host/d.jsonl?sig=<redacted>&x=<redacted>'
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["REDACTED", "redact_url", "redact_urls"]

#: What a secret reads as wherever the config is shown or written.
REDACTED = "<redacted>"

#: A URL within a text: a scheme, `://`, and what follows up to a space or a quote.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
#: A string that is a URL and nothing else (a chat template that mentions one is not).
_WHOLE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
_QUERY_VALUE = re.compile(r"=[^&;]*")


def redact_url(url: str) -> str:
    """`url` with its login and its query's values replaced by `REDACTED`; anything that is not a URL with
    either (a text that only holds one, such as a chat template) comes back unchanged."""
    if ("@" not in url and "?" not in url) or not _WHOLE_URL.fullmatch(url):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL after all (an unbalanced `[` in its host)
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = _QUERY_VALUE.sub(f"={REDACTED}", parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_urls(text: str) -> str:
    """`text` (an error message) with every URL in it redacted (`redact_url`)."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
