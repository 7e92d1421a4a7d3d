// Single-key shortcuts for reviewers (on unless turned off on the account page: WCAG
// 2.1.4): on the queue, j focuses the next row; on an operation, a goes to Approve, or
// to the approval of an edit once it is previewed (its typed confirmation first, if it
// has one: an irreversible call is never approved by a key), r opens Reject with the focus in its reason, n opens the next operation waiting,
// q goes back to the queue. Never inside a field, never with a modifier key.
(function () {
  "use strict";
  if (document.body.dataset.shortcuts !== "on") return;

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function nextRow() {
    const links = Array.from(document.querySelectorAll("#queue tr[id] a[id]"));
    const at = links.indexOf(document.activeElement);
    return links[at + 1] || links[0];
  }

  const keys = {
    j: nextRow,
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
      const next = document.getElementById("next-operation");
      if (next) next.click();
      return null;
    },
    q: function () {
      const queue = document.getElementById("nav-approvals");
      if (queue) queue.click();
      return null;
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
