// A new agent token is shown once, in a read-only field that has the focus when the
// page opens (autofocus: no script needed for that). Here: the field's text is selected
// whenever it has the focus, so Ctrl+C (⌘C) copies it at once, and the Copy button
// appears where the browser lets a page write to the clipboard (a secure context:
// HTTPS or localhost), saying "Copied" in a status region that screen readers announce.
(function () {
  "use strict";
  const token = document.getElementById("new-token");
  if (!token) return;
  const copy = document.getElementById("copy-token");
  const status = document.getElementById("copy-status");

  token.addEventListener("focus", function () {
    token.select();
  });
  if (document.activeElement === token) token.select();
  if (!navigator.clipboard) return;

  copy.hidden = false;
  copy.addEventListener("click", function () {
    status.textContent = ""; // said again on a second click
    navigator.clipboard.writeText(token.value).then(
      function () {
        status.textContent = "Copied";
      },
      function () {
        status.textContent = "Not copied: the browser refused. Press Ctrl+C (⌘C) instead.";
        token.focus();
      },
    );
  });
})();
