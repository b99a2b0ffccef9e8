"""The /api/v1/uploads/ endpoints: chunked, resumable uploads of big bundles (tus 1.0.0: core, creation,
termination; leaderboard/resumable.py does the work, docs/service.md describes the API)."""

from __future__ import annotations

import base64
import binascii

from django.conf import settings
from django.http import HttpRequest
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from leaderboard import limits, partials, resumable
from leaderboard.api import serializers as s
from leaderboard.errors import Rejected
from leaderboard.models import Site, UploadSession

OCTETS = "application/offset+octet-stream"
TUS = {"Tus-Resumable": resumable.TUS_VERSION}

CheckError = inline_serializer("UploadCheckError", {"detail": serializers.CharField(),
                                                    "check": serializers.CharField(help_text="the check that failed")})
UploadState = inline_serializer("UploadState", {
    "id": serializers.UUIDField(), "offset": serializers.IntegerField(), "length": serializers.IntegerField(),
    "sha256": serializers.CharField(), "submission": serializers.IntegerField(allow_null=True)})
TUS_HEADER = OpenApiParameter("Tus-Resumable", str, OpenApiParameter.HEADER, required=True, enum=["1.0.0"])


class SiteOnly(permissions.BasePermission):
    message = "uploads need a site token: Authorization: Token <site token>"

    def has_permission(self, request, view):
        return request.method == "OPTIONS" or isinstance(request.auth, Site)


def refused(exc: Rejected) -> Response:
    return Response({"detail": exc.detail, "check": exc.check}, status=exc.status, headers=TUS)


def header_int(request: HttpRequest, name: str) -> int | None:
    try:
        value = int(request.headers.get(name, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def metadata(raw: str) -> dict[str, str]:
    """tus Upload-Metadata: comma-separated `key base64(value)` pairs."""
    out = {}
    for pair in raw.split(","):
        key, _, value = pair.strip().partition(" ")
        if key:
            try:
                out[key] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise Rejected("request", f"Upload-Metadata {key!r} is not base64") from None
    return out


class TusView(APIView):
    permission_classes = [SiteOnly]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method != "OPTIONS" and request.headers.get("Tus-Resumable") != resumable.TUS_VERSION:
            raise Unsupported()

    def handle_exception(self, exc):
        if isinstance(exc, Unsupported):
            return Response({"detail": f"send Tus-Resumable: {resumable.TUS_VERSION}", "check": "request"},
                            status=status.HTTP_412_PRECONDITION_FAILED, headers={"Tus-Version": resumable.TUS_VERSION})
        if isinstance(exc, Rejected):
            return refused(exc)
        return super().handle_exception(exc)

    def session(self, request, pk) -> UploadSession:
        found = UploadSession.objects.filter(pk=pk, site=request.auth).select_related("site").first()
        if found is None:  # another site's upload is as unknown as one that never was
            raise Rejected("upload", f"no upload {pk} of this site", status=404)
        return found


class Unsupported(Exception):
    pass


class UploadsView(TusView):
    """Start a chunked upload (tus creation), or discover the protocol (OPTIONS)."""

    @extend_schema(exclude=True)
    def options(self, request, *args, **kwargs):
        return Response(status=status.HTTP_204_NO_CONTENT, headers={
            **TUS, "Tus-Version": resumable.TUS_VERSION, "Tus-Extension": resumable.TUS_EXTENSIONS,
            "Tus-Max-Size": str(settings.AIPERF_MAX_CHUNKED_UPLOAD_BYTES)})

    @extend_schema(
        request=None, parameters=[
            TUS_HEADER,
            OpenApiParameter("Upload-Length", int, OpenApiParameter.HEADER, required=True,
                             description="the bundle's size in bytes (at most AIPERF_MAX_CHUNKED_UPLOAD_BYTES)"),
            OpenApiParameter("Upload-Metadata", str, OpenApiParameter.HEADER, required=True,
                             description="`sha256 <base64 of the bundle's hex sha256>`, optionally "
                                         "`,filename <base64 name>` and `,rehearsal <base64 of true>` (a "
                                         "rehearsal's run, as `submit --rehearsal` sends it)")],
        responses={201: OpenApiResponse(UploadState, "created (or the site's unfinished upload of the same "
                                                     "bundle): its URL in Location"),
                   200: OpenApiResponse(s.SubmissionSerializer, "this bundle was submitted before"),
                   400: CheckError, 413: CheckError, 429: CheckError, 507: CheckError})
    def post(self, request):
        length = header_int(request, "Upload-Length")
        if length is None:
            raise Rejected("request", "send Upload-Length: the bundle's size in bytes")
        meta = metadata(request.headers.get("Upload-Metadata", ""))
        made = resumable.create(request.auth, length, meta.get("sha256", ""), rehearsal=s.flag(meta.get("rehearsal")))
        if made.submission is not None:
            return Response(s.SubmissionSerializer(made.submission, context={"request": request}).data,
                            status=status.HTTP_200_OK, headers=TUS)
        assert made.session is not None
        url = request.build_absolute_uri(f"/api/v1/uploads/{made.session.id}/")
        return Response(state(made.session), status=status.HTTP_201_CREATED,
                        headers={**TUS, "Location": url, "Upload-Offset": str(resumable.offset(made.session) or 0)})


def state(session: UploadSession) -> dict:
    return {"id": str(session.id), "offset": resumable.offset(session), "length": session.length,
            "sha256": session.sha256, "submission": session.submission_id}


class UploadView(TusView):
    """One chunked upload: its offset (HEAD/GET), its next bytes (PATCH), its end (DELETE)."""

    @extend_schema(parameters=[TUS_HEADER], responses={200: UploadState, 404: CheckError})
    def get(self, request, pk):
        """The upload's state as JSON (HEAD: the same in Upload-Offset and Upload-Length)."""
        session = self.session(request, pk)
        if resumable.offset(session) is None:
            raise resumable.gone(session)
        return Response(state(session), headers={**TUS, "Cache-Control": "no-store",
                                                 "Upload-Offset": str(resumable.offset(session)),
                                                 "Upload-Length": str(session.length)})

    def head(self, request, pk):
        answer = self.get(request, pk)
        return Response(status=answer.status_code, headers=dict(answer.items()))  # no body (RFC 9110)

    @extend_schema(
        request={OCTETS: OpenApiTypes.BINARY},
        parameters=[TUS_HEADER, OpenApiParameter("Upload-Offset", int, OpenApiParameter.HEADER, required=True,
                                                 description="the upload's offset (HEAD): where these bytes go")],
        responses={204: OpenApiResponse(None, "appended: the new offset in Upload-Offset"),
                   201: OpenApiResponse(s.SubmissionSerializer, "the last bytes: checked and submitted"),
                   200: OpenApiResponse(s.SubmissionSerializer, "the same bundle was submitted before"),
                   400: CheckError, 403: CheckError, 404: CheckError, 409: CheckError, 413: CheckError,
                   415: CheckError, 429: CheckError, 507: CheckError})
    def patch(self, request, pk):
        """Append the body at Upload-Offset. The request that completes the upload (or an empty one at the
        end, when that request's answer was lost) checks the sha256 and makes the submission."""
        session = self.session(request, pk)
        if request.content_type.split(";")[0].strip() != OCTETS:
            raise Rejected("request", f"send the bytes as Content-Type: {OCTETS}", status=415)
        at = header_int(request, "Upload-Offset")
        count = header_int(request, "Content-Length") or 0
        if at is None:
            raise Rejected("request", "send Upload-Offset: the upload's offset (HEAD)")
        with limits.upload_slot(request.auth):
            now: int | None = resumable.append(session, request._request.read, at, count) if count else \
                resumable.offset(session)  # nothing to append: the end, asked again
            if now is None:
                raise resumable.gone(session)
            if at != now and not count:
                raise Rejected("offset", f"Upload-Offset {at} is not this upload's offset {now}", status=409)
            if now < session.length:
                return Response(status=status.HTTP_204_NO_CONTENT, headers={**TUS, "Upload-Offset": str(now)})
            received = resumable.finish(session)
        data = s.SubmissionSerializer(received.submission, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED if received.created else status.HTTP_200_OK,
                        headers={**TUS, "Upload-Offset": str(session.length)})

    @extend_schema(parameters=[TUS_HEADER], responses={204: None, 404: CheckError})
    def delete(self, request, pk):
        """Give up the upload: its bytes are removed (tus termination)."""
        session = self.session(request, pk)
        with resumable.locked(session):
            partials.drop(session)
        return Response(status=status.HTTP_204_NO_CONTENT, headers=TUS)
