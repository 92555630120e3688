// laneboard dashboard: live refresh over Server-Sent Events, actions through the REST API.
(function () {
  "use strict";

  function liveState(text) {
    var el = document.getElementById("live-state");
    if (el) el.textContent = text;
  }

  // A live update redraws a section from its partial. It never discards what a person
  // is doing there: the text typed into its forms, the focus and caret, a refused
  // submission's error are carried into the new markup, and the redraw waits while a
  // form of the section is being sent, a pointer is pressed in it, a list is open or
  // a composition is under way.
  var pressed = null, composing = false;
  document.addEventListener("pointerdown", function (ev) { pressed = ev.target; }, true);
  ["pointerup", "pointercancel", "dragend"].forEach(function (type) {
    document.addEventListener(type, function () { pressed = null; }, true);
  });
  window.addEventListener("blur", function () { pressed = null; composing = false; });
  document.addEventListener("compositionstart", function () { composing = true; }, true);
  document.addEventListener("compositionend", function () { composing = false; }, true);

  function busy(root) {
    var el = document.activeElement;
    var inside = !!(el && root.contains(el));
    return !!root.querySelector("form[data-sending]") || !!(pressed && root.contains(pressed)) ||
      (inside && (composing || el.tagName === "SELECT"));
  }

  function formKey(form) { return form.id || (form.dataset.api || "") + " " + (form.dataset.fixed || ""); }

  function edited(el) {
    if (el.tagName === "SELECT") {
      return Array.prototype.some.call(el.options, function (o) { return o.selected !== o.defaultSelected; });
    }
    if (el.type === "checkbox" || el.type === "radio") return el.checked !== el.defaultChecked;
    return el.value !== el.defaultValue;
  }

  // What a person has put into the section: each edited or focused field, each shown error.
  function entered(root) {
    var focus = document.activeElement, kept = [];
    root.querySelectorAll("form").forEach(function (form) {
      var key = formKey(form);
      var error = form.querySelector(".error");
      if (error && error.textContent) kept.push({ key: key, error: error.textContent });
      Array.prototype.forEach.call(form.elements, function (el, i) {
        if (el !== focus && !(el.name && edited(el))) return;
        kept.push({ key: key, index: i, name: el.name, tag: el.tagName, focused: el === focus,
                    edited: !!el.name && edited(el), value: el.value, checked: el.checked,
                    start: el.selectionStart, end: el.selectionEnd, dir: el.selectionDirection,
                    scroll: el.scrollTop });
      });
    });
    if (focus && focus.id && root.contains(focus) && !focus.form) kept.push({ id: focus.id, focused: true });
    return kept;
  }

  function counterpart(root, k) {
    if (k.id) return root.querySelector("#" + CSS.escape(k.id));
    var form = Array.prototype.find.call(root.querySelectorAll("form"), function (f) { return formKey(f) === k.key; });
    if (!form) return null;
    if (k.error !== undefined) return form.querySelector(".error");
    var el = form.elements[k.index];
    if (el && el.name === k.name && el.tagName === k.tag) return el;
    return k.name ? form.querySelector("[name=\"" + CSS.escape(k.name) + "\"]") : null;
  }

  // A field the person is in, with text of theirs, that the new markup no longer has.
  function orphaned(kept, html) {
    if (!kept.some(function (k) { return k.focused && k.edited; })) return false;
    var t = document.createElement("template");
    t.innerHTML = html;
    return kept.some(function (k) { return k.focused && k.edited && !counterpart(t.content, k); });
  }

  function carry(root, kept) {
    kept.forEach(function (k) {
      var el = counterpart(root, k);
      if (!el) return;
      if (k.error !== undefined) { el.textContent = k.error; return; }
      if (k.edited) {
        if (el.type === "checkbox" || el.type === "radio") el.checked = k.checked;
        else if (el.tagName !== "SELECT" || Array.prototype.some.call(el.options, function (o) { return o.value === k.value; })) el.value = k.value;
      }
      if (!k.focused || !el.focus) return;
      el.focus({ preventScroll: true });
      if (typeof k.start === "number" && el.setSelectionRange) {
        try { el.setSelectionRange(k.start, k.end, k.dir || "none"); } catch (e) { /* a field without a caret */ }
      }
      if (k.scroll) el.scrollTop = k.scroll;
    });
  }

  function partialUrl(root) {
    var url = root.dataset.partial;
    if (root.dataset.query) {  // page parameters the section follows (?turn=N)
      var here = new URLSearchParams(window.location.search);
      var keep = new URLSearchParams();
      root.dataset.query.split(",").forEach(function (k) { if (here.get(k)) keep.set(k, here.get(k)); });
      if (keep.toString()) url += (url.indexOf("?") < 0 ? "?" : "&") + keep.toString();
    }
    return url;
  }

  // One partial in flight at a time, so an older answer never overwrites a newer one;
  // a wake-up during a fetch (or while its redraw waits) fetches again once it is drawn.
  // A partial that does not arrive is fetched again, sooner than the next event would
  // come: 1 s after the first failure, doubling to 15 s while they last.
  function refresher(root) {
    var timer = null, loading = false, again = false, backoff = 0;
    function later(ms) { if (!timer) timer = setTimeout(load, ms); }
    function settle() {
      loading = false;
      backoff = 0;
      if (again) { again = false; later(120); }
    }
    function failed() {
      loading = false;
      again = false;
      backoff = Math.min(backoff ? backoff * 2 : 1000, 15000);
      later(backoff);
    }
    function draw(html) {
      var kept = entered(root);
      if (busy(root) || orphaned(kept, html)) return false;
      var list = root.querySelector(".transcript");
      var atEnd = list && list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
      root.innerHTML = html;
      carry(root, kept);
      var fresh = root.querySelector(".transcript");
      if (fresh && (atEnd || !list)) fresh.scrollTop = fresh.scrollHeight;
      document.dispatchEvent(new CustomEvent("laneboard:refreshed"));
      return true;
    }
    function place(html) {
      if (draw(html)) settle();
      else setTimeout(function () { place(html); }, 250);
    }
    function load() {
      timer = null;
      loading = true;
      again = false;
      fetch(partialUrl(root), { headers: { Accept: "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html === null) failed(); else place(html); }, failed);
    }
    return function () {
      if (loading) again = true; else later(120);
    };
  }

  // Follow the event stream with fetch so every event type wakes a refresh,
  // resuming after the last seen cursor when the connection drops.
  function follow(root) {
    var refresh = refresher(root);
    root.laneboardRefresh = refresh;
    if (root.dataset.load) refresh();  // a section drawn by its partial from the start
    var skip = (root.dataset.skip || "").split(",").filter(Boolean);
    var url = root.dataset.live;
    var last = null;
    function connect() {
      var target = url;
      fetch(target, { headers: last ? { Accept: "text/event-stream", "Last-Event-ID": last }
                                     : { Accept: "text/event-stream" } })
        .then(function (resp) {
          if (!resp.ok || !resp.body) throw new Error("stream " + resp.status);
          liveState("live");
          var reader = resp.body.getReader();
          var decoder = new TextDecoder();
          var buf = "";
          function pump() {
            return reader.read().then(function (chunk) {
              if (chunk.done) throw new Error("stream closed");
              buf += decoder.decode(chunk.value, { stream: true });
              var i;
              while ((i = buf.indexOf("\n\n")) >= 0) {
                var block = buf.slice(0, i);
                buf = buf.slice(i + 2);
                var m = block.match(/^id: ([0-9.]+)$/m);
                var type = (block.match(/^event: (.+)$/m) || [])[1] || "";
                if (m) {
                  last = m[1];
                  if (!skip.some(function (s) { return type === s; })) refresh();
                }
              }
              return pump();
            });
          }
          return pump();
        })
        .catch(function () {
          liveState("reconnecting…");
          setTimeout(connect, 2000);
        });
    }
    connect();
  }

  function formBody(form) {
    var body = form.dataset.fixed ? JSON.parse(form.dataset.fixed) : {};
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!el.name) return;
      var v = el.value;
      if (el.dataset.optional && v.trim() === "") return;
      if (el.dataset.prefix) v = el.dataset.prefix + v;
      if (el.dataset.type === "int") v = parseInt(v, 10);
      else if (el.dataset.type === "list") v = v.split(",").map(function (s) { return s.trim(); }).filter(Boolean);
      else if (el.dataset.type === "lines") v = v.split("\n").map(function (s) { return s.trim(); }).filter(Boolean);
      body[el.name] = v;
    });
    return body;
  }

  // Send an action; a refusal (or no answer) is said in errorEl, or in an alert.
  function send(spec, body, errorEl, done, key) {
    var parts = spec.split(" ");
    var headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (key) headers["Idempotency-Key"] = key;  // a run transition: one key per click
    function refused(msg) { if (errorEl) errorEl.textContent = msg; else alert(msg); }
    return fetch(parts[1], {
      method: parts[0],
      headers: headers,
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().then(function (data) { return { ok: r.ok, data: data }; },
                           function () { return { ok: false, data: { code: "HTTP_" + r.status, message: r.statusText } }; });
    }).then(function (res) {
      if (!res.ok) {
        refused(res.data.code + ": " + res.data.message + (res.data.fix ? " — " + res.data.fix : ""));
        return;
      }
      if (errorEl) errorEl.textContent = "";
      done();
      document.querySelectorAll("[data-live]").forEach(function (root) {
        if (root.laneboardRefresh) root.laneboardRefresh();
      });
    }, function () { refused("UNREACHABLE: the server did not answer — try again"); });
  }

  // A form being sent is not sent twice, and its section is not redrawn under it.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.dataset || !form.dataset.api) return;
    ev.preventDefault();
    if (form.dataset.sending) return;
    form.dataset.sending = "1";
    send(form.dataset.api, formBody(form), form.querySelector(".error"), function () {
      if (form.dataset.reset) form.reset();
    }).then(function () { delete form.dataset.sending; });
  });

  document.addEventListener("click", function (ev) {
    var btn = ev.target;
    if (btn.tagName === "BUTTON" && btn.dataset.help) {
      toggleHelp(btn.dataset.help === "open");
      return;
    }
    if (btn.tagName !== "BUTTON" || !btn.dataset.api) return;
    ev.preventDefault();
    var key = btn.dataset.idempotent ? "ui-" + Date.now() + "-" + Math.random().toString(36).slice(2) : null;
    send(btn.dataset.api, btn.dataset.body ? JSON.parse(btn.dataset.body) : {}, null, function () {}, key);
  });

  // Keyboard: j/k select the next or previous card, Enter opens it, / searches,
  // a answers (the card's answer box, or the first card awaiting an answer), ? help.
  var selected = null;

  function cards() { return Array.prototype.slice.call(document.querySelectorAll("article.card")); }

  function select(el) {
    cards().forEach(function (c) { c.classList.remove("selected"); });
    if (!el) { selected = null; return; }
    el.classList.add("selected");
    selected = el.dataset.ref;
    el.scrollIntoView({ block: "nearest" });
  }

  function step(by) {
    var all = cards();
    if (!all.length) return;
    var i = all.findIndex(function (c) { return c.dataset.ref === selected; });
    i = i < 0 ? (by > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, i + by));
    select(all[i]);
  }

  function toggleHelp(show) {
    var help = document.getElementById("help");
    if (help) help.hidden = show === undefined ? !help.hidden : !show;
  }

  function answer() {
    var box = document.querySelector("#answer textarea, #answer-inline textarea");
    if (box) { box.focus(); return; }
    var waiting = document.querySelector('article.card[data-status="awaiting"]');
    if (waiting) window.location.href = "/cards/" + waiting.dataset.ref + "#answer";
  }

  var keys = {
    j: function () { step(1); },
    k: function () { step(-1); },
    Enter: function () { if (selected) window.location.href = "/cards/" + selected; },
    "/": function () {
      var search = document.getElementById("search");
      if (search) { search.focus(); search.select(); } else window.location.href = "/#search";
    },
    a: answer,
    "?": function () { toggleHelp(); },
    Escape: function () { toggleHelp(false); select(null); }
  };

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var t = ev.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    var act = keys[ev.key];
    if (!act) return;
    ev.preventDefault();
    act();
  });

  document.addEventListener("laneboard:refreshed", function () {
    if (!selected) return;
    var el = document.querySelector('article.card[data-ref="' + selected + '"]');
    if (el) el.classList.add("selected");
  });

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.querySelectorAll("[data-live]");
    live.forEach(follow);
    if (!live.length) liveState("");  // a page drawn once (the pictures)
  });

  // After the load, when the browser has scrolled to the fragment (which takes the focus).
  window.addEventListener("load", function () {
    if (window.location.hash === "#search" && document.getElementById("search")) {
      document.getElementById("search").focus();
    }
    if (window.location.hash === "#answer") {
      var box = document.querySelector("#answer textarea");
      if (box) box.focus();
    }
  });
})();
