"""pytest plugin (-p fencegate_token): every botocore client the tests
create adds the Fencing-Token header, with the value of FENCEGATE_TOKEN,
to each request before it is signed (so the worker's signature covers it,
as coordinator/client/awsfence does for Go workers). Unset: no header, the
tests talk to the store directly. Requests the tests send without botocore
(presigned URLs through `requests`) carry no token."""
import os

import botocore.session

_token = os.environ.get("FENCEGATE_TOKEN")

if _token:
    _create_client = botocore.session.Session.create_client

    def _add_token(request, **kwargs):
        request.headers["Fencing-Token"] = _token

    def create_client(self, *args, **kwargs):
        client = _create_client(self, *args, **kwargs)
        client.meta.events.register("before-sign", _add_token)
        return client

    botocore.session.Session.create_client = create_client
