// Single-key shortcuts for reviewers (on unless turned off on the account page: WCAG
// 2.1.4): on the queue, j focuses the next row and k the previous (passing over what
// the reviewer approved, which waits for a second reviewer); on an operation, a
// goes to Approve in the decision bar, or to the approval of an edit once it is
// previewed (its typed confirmation first, if it has one: an irreversible call is never
// approved by a key; under "Approve anyway" when the preview says it would fail), r
// opens Reject with the focus in its reason, e opens the editor with the focus in it,
// n opens the next operation waiting in the queue's order and k the one before, q goes
// back to the queue. On a request, the same: a goes where the answer bar's first
// control leads (Sign off itself; a question's box; data's first field), 1 to 9 to
// the first to ninth choice of a choice, r opens Reject with the focus in its reason,
// n, k and q as on an operation. A key that moves the focus to a button never presses
// it: Enter does. Never inside a field, never with a modifier key.
//
// Whatever the setting, the decision bar's links (Reject, Edit, Approve when it needs
// more than a click, and a request's Answer and Choose) open what folds the field they
// name and put the focus in it: a link alone scrolls to a field without focusing it.
(function () {
  "use strict";

  // ``target`` (if any), with the <details> that folds it opened.
  function reveal(target) {
    const folded = target && target.closest("details");
    if (folded) folded.open = true;
    return target;
  }

  // Focus ``target``, whole in sight and clear of the decision bar (the page's scroll
  // padding): focusing scrolls to what is out of the window, not to what the bar covers.
  function bring(target) {
    target.focus();
    target.scrollIntoView({ block: "nearest" });
  }

  const bar = document.getElementById("decision-bar");
  if (bar) {
    bar.addEventListener("click", function (event) {
      const link = event.target.closest("a[href^='#']");
      const target = link && reveal(document.getElementById(link.hash.slice(1)));
      if (!target) return;
      event.preventDefault();
      bring(target);
    });
  }

  if (document.body.dataset.shortcuts !== "on") return;

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function row(step) {
    const rows = "#queue tbody:not(.seconds) tr[id] a[id]";
    const links = Array.from(document.querySelectorAll(rows));
    const at = links.indexOf(document.activeElement);
    if (at === -1) return step > 0 ? links[0] : links[links.length - 1];
    return links[(at + step + links.length) % links.length];
  }

  // Follow the link ``selector`` finds, if any: an operation's or a request's.
  function follow(selector) {
    const link = document.querySelector(selector);
    if (link) link.click();
    return null;
  }

  // An operation's approval, or the approval of its edit once previewed.
  function approval() {
    const form = document.querySelector("form.decision-approve, form.decision-edit");
    if (!form) return null;
    const confirm = form.querySelector("input[name=confirm]");
    if (confirm) return reveal(confirm);
    return document.querySelector("#decision-bar button") || reveal(form).querySelector("button");
  }

  // A request's answer: the answer bar's first control, or where that link leads.
  function answer() {
    const first = document.querySelector("#decision-bar .primary");
    if (!first || first.tagName === "BUTTON") return first;
    return reveal(document.getElementById(first.hash.slice(1)));
  }

  const keys = {
    j: function () {
      return row(1);
    },
    k: function () {
      if (document.getElementById("queue")) return row(-1);
      return follow("#previous-operation, #previous-request");
    },
    a: function () {
      return approval() || answer();
    },
    r: function () {
      const reason = "form.decision-reject, form.answer-reject";
      return reveal(document.querySelector(`:is(${reason}) textarea[name=comment]`));
    },
    e: function () {
      return reveal(document.querySelector("form.editor textarea[name=arguments]"));
    },
    n: function () {
      return follow("#next-operation, #next-request");
    },
    q: function () {
      return follow("#nav-approvals");
    },
  };
  for (let n = 1; n <= 9; n += 1) {
    keys[String(n)] = function () {
      return document.getElementById("choice-" + n);
    };
  }

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || typing(event.target)) return;
    const act = keys[event.key];
    if (!act) return;
    const target = act();
    event.preventDefault();
    if (target) bring(target);
  });
})();
