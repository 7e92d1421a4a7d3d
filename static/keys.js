// Single-key shortcuts for reviewers (on unless turned off on the account page: WCAG
// 2.1.4): on the queue, j focuses the next row and k the previous; on an operation, a
// goes to Approve, or to the approval of an edit once it is previewed (its typed
// confirmation first, if it has one: an irreversible call is never approved by a key),
// r opens Reject with the focus in its reason, n opens the next operation waiting in
// the queue's order and k the one before, q goes back to the queue. Never inside a
// field, never with a modifier key.
(function () {
  "use strict";
  if (document.body.dataset.shortcuts !== "on") return;

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function row(step) {
    const links = Array.from(document.querySelectorAll("#queue tr[id] a[id]"));
    const at = links.indexOf(document.activeElement);
    if (at === -1) return step > 0 ? links[0] : links[links.length - 1];
    return links[(at + step + links.length) % links.length];
  }

  function follow(id) {
    const link = document.getElementById(id);
    if (link) link.click();
    return null;
  }

  const keys = {
    j: function () {
      return row(1);
    },
    k: function () {
      return document.getElementById("queue") ? row(-1) : follow("previous-operation");
    },
    a: function () {
      const form = document.querySelector("form.decision-approve, form.decision-edit");
      return form && (form.querySelector("input[name=confirm]") || form.querySelector("button"));
    },
    r: function () {
      const form = document.querySelector("form.decision-reject");
      if (!form) return null;
      form.closest("details").open = true;
      return form.querySelector("textarea[name=comment]");
    },
    n: function () {
      return follow("next-operation");
    },
    q: function () {
      return follow("nav-approvals");
    },
  };

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || typing(event.target)) return;
    const act = keys[event.key];
    if (!act) return;
    const target = act();
    event.preventDefault();
    if (target) target.focus();
  });
})();
