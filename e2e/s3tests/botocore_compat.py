"""pytest plugin (-p botocore_compat): the conditional-request parameters
that s3-tests passes and Debian's botocore (1.29) does not know yet, sent
as the headers newer botocore sends for them. Used for the direct and the
gateway run alike, so both see the same requests.

  PutObject, CompleteMultipartUpload: IfMatch, IfNoneMatch
  DeleteObject: IfMatch, IfMatchSize, IfMatchLastModifiedTime

Parameters botocore knows are left to it. (The per-object ETag, Size and
LastModifiedTime of DeleteObjects are in the request body and are not
back-ported: those tests fail directly with ParamValidationError.)"""
import datetime
import email.utils

import botocore.session

_HEADERS = {
    "IfMatch": "If-Match",
    "IfNoneMatch": "If-None-Match",
    "IfMatchSize": "x-amz-if-match-size",
    "IfMatchLastModifiedTime": "x-amz-if-match-last-modified-time",
}
_OPS = {
    "PutObject": ("IfMatch", "IfNoneMatch"),
    "CompleteMultipartUpload": ("IfMatch", "IfNoneMatch"),
    "DeleteObject": ("IfMatch", "IfMatchSize", "IfMatchLastModifiedTime"),
}


def _header_value(v):
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return email.utils.format_datetime(v.astimezone(datetime.timezone.utc), usegmt=True)
    return str(v)


def _take_params(params, model, context, **kwargs):
    known = model.input_shape.members if model.input_shape else {}
    for name in _OPS.get(model.name, ()):
        if name in params and name not in known:
            context.setdefault("compat_headers", {})[_HEADERS[name]] = _header_value(params.pop(name))


def _add_headers(request, **kwargs):
    for k, v in getattr(request, "context", {}).get("compat_headers", {}).items():
        request.headers[k] = v


_create_client = botocore.session.Session.create_client


def create_client(self, *args, **kwargs):
    client = _create_client(self, *args, **kwargs)
    if client.meta.service_model.service_name == "s3":
        client.meta.events.register("provide-client-params.s3", _take_params)
        client.meta.events.register("before-sign.s3", _add_headers)
    return client


botocore.session.Session.create_client = create_client
