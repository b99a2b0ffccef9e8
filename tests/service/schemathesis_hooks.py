"""schemathesis hooks for the API fuzzing (loaded by the CLI through SCHEMATHESIS_HOOKS and imported by
the in-process stateful run): a chunk of a resumable upload (tus, `application/offset+octet-stream`)
is raw bytes, serialized as schemathesis serializes `application/octet-stream`."""

import schemathesis

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
