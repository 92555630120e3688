// laneboard dashboard: live refresh over Server-Sent Events, actions through the REST API.
(function () {
  "use strict";

  function liveState(text) {
    var el = document.getElementById("live-state");
    if (el) el.textContent = text;
  }

  function refresher(root) {
    var timer = null;
    return function () {
      if (timer) return;
      timer = setTimeout(function () {
        timer = null;
        fetch(root.dataset.partial, { headers: { Accept: "text/html" } })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) { if (html !== null) root.innerHTML = html; });
      }, 120);
    };
  }

  // Follow the event stream with fetch so every event type wakes a refresh,
  // resuming after the last seen id when the connection drops.
  function follow(root) {
    var refresh = refresher(root);
    root.laneboardRefresh = refresh;
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
                var m = block.match(/^id: (\d+)$/m);
                if (m) { last = m[1]; refresh(); }
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

  function send(spec, body, errorEl, done) {
    var parts = spec.split(" ");
    fetch(parts[1], {
      method: parts[0],
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().then(function (data) { return { ok: r.ok, data: data }; });
    }).then(function (res) {
      if (!res.ok) {
        var msg = res.data.code + ": " + res.data.message + (res.data.fix ? " — " + res.data.fix : "");
        if (errorEl) errorEl.textContent = msg; else alert(msg);
        return;
      }
      if (errorEl) errorEl.textContent = "";
      done();
      document.querySelectorAll("[data-live]").forEach(function (root) {
        if (root.laneboardRefresh) root.laneboardRefresh();
      });
    });
  }

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!form.dataset || !form.dataset.api) return;
    ev.preventDefault();
    send(form.dataset.api, formBody(form), form.querySelector(".error"), function () {
      if (form.dataset.reset) form.reset();
    });
  });

  document.addEventListener("click", function (ev) {
    var btn = ev.target;
    if (btn.tagName !== "BUTTON" || !btn.dataset.api) return;
    ev.preventDefault();
    send(btn.dataset.api, btn.dataset.body ? JSON.parse(btn.dataset.body) : {}, null, function () {});
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(follow);
  });
})();
