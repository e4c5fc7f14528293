"""The fingerprint of a request held for approval (gate/_approval.py): the same request rebuilt
has the same fingerprint, a changed one another."""

from __future__ import annotations

from browserworker.gate._approval import describe_request, request_fingerprint


def test_fingerprint_ignores_anti_forgery_tokens_and_field_order() -> None:
    """The same form rebuilt after a restart (a new CSRF token, fields in another order) has the
    same fingerprint; another value or URL does not."""
    form = "application/x-www-form-urlencoded"
    a = request_fingerprint("POST", "https://s/orders", "csrf_token=1&item=tea&q=1", form)
    assert a == request_fingerprint("POST", "https://s/orders", "q=1&item=tea&csrf_token=2", form)
    assert a != request_fingerprint("POST", "https://s/orders", "q=2&item=tea&csrf_token=1", form)
    assert a != request_fingerprint("POST", "https://s/other", "csrf_token=1&item=tea&q=1", form)


def _multipart(boundary: str, *parts: tuple[str, str | None, str]) -> tuple[str, str]:
    """A multipart/form-data body as Chromium writes it, and its content type."""
    body = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"'
        + (f'; filename="{filename}"\r\nContent-Type: text/plain' if filename is not None else "")
        + f"\r\n\r\n{value}\r\n"
        for name, filename, value in parts
    )
    return body + f"--{boundary}--\r\n", f"multipart/form-data; boundary={boundary}"


def test_a_multipart_form_sent_again_is_the_same_request() -> None:
    """A multipart form (a file upload) sent again under a new boundary (the browser draws one
    for every submission), with a new anti-forgery token and its fields in another order, has the
    same fingerprint; another file content, another file name or another value does not."""

    def fp(boundary: str, *parts: tuple[str, str | None, str]) -> str:
        return request_fingerprint("POST", "https://s/send", *_multipart(boundary, *parts))

    doc, note = ("doc", "invoice.txt", "INVOICE-7731"), ("note", None, "paid")
    a = fp("----WebKitFormBoundaryA1", ("csrf_token", None, "t1"), doc, note)
    assert a == fp("----WebKitFormBoundaryZ9", note, doc, ("csrf_token", None, "t2"))
    assert a != fp("----WebKitFormBoundaryA1", ("csrf_token", None, "t1"), ("doc", "invoice.txt", "INVOICE-7732"), note)
    assert a != fp("----WebKitFormBoundaryA1", ("csrf_token", None, "t1"), ("doc", "other.txt", "INVOICE-7731"), note)
    assert a != fp("----WebKitFormBoundaryA1", ("csrf_token", None, "t1"), doc, ("note", None, "unpaid"))


def test_a_person_sees_a_multipart_forms_fields_and_its_files_by_name() -> None:
    """The summary a person approves lists a multipart form's fields (the token masked) and each
    file by name (and size and digest when the body holds its content), never its content."""
    from browserworker._redact import Redactor

    body, kind = _multipart("b0", ("csrf_token", None, "t1"), ("doc", "invoice.txt", "INVOICE-7731"))
    summary = describe_request("POST", "https://s/send", body, {"content-type": kind}, Redactor())
    fields = dict(summary["fields"])
    assert fields["doc"].startswith("[file 'invoice.txt', 12 bytes, sha256 ") and "INVOICE" not in str(summary)
    assert fields["csrf_token"] != "t1"
    body, kind = _multipart("b1", ("doc", "invoice.txt", ""))  # as Chromium shows a file chosen from disk
    summary = describe_request("POST", "https://s/send", body, {"content-type": kind}, Redactor())
    assert summary["fields"] == [["doc", "[file 'invoice.txt']"]]
