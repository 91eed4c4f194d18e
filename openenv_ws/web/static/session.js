// One session of protocol v1 over a WebSocket: requests get ids, replies are
// matched to them, error frames become RemoteError, a lost connection fails
// every request still waiting.
import { MAX_ID, decodeReply, encodeRequest } from "./protocol.js";

/** An `error` frame from the server. */
export class RemoteError extends Error {
  constructor(frame) {
    super(`${frame.code}: ${frame.message}`);
    this.code = frame.code;
    this.fatal = frame.fatal;
  }
}

/** One session = one WebSocket. Replies come in request order and are matched by id. */
export class Session {
  static connect(url) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.binaryType = "arraybuffer";
      ws.onopen = () => resolve(new Session(ws));
      ws.onerror = () => reject(new Error(`cannot connect to ${url}; is the server running?`));
    });
  }

  constructor(ws) {
    this.ws = ws;
    this.nextId = 1;
    this.pending = new Map();
    this.closed = false;
    this.onlost = null;
    this.latency = 0; // milliseconds from sending the last answered request to its reply
    ws.onerror = null;
    ws.onmessage = (event) => this.receive(event.data);
    this.fatal = null; // the message of a fatal error frame, which explains the close that follows
    ws.onclose = (event) => this.lost(this.fatal ?? `the connection closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`);
  }

  request(frame) {
    if (this.closed) return Promise.reject(new Error("the session is closed; start a new one"));
    const id = this.nextId;
    this.nextId = id >= MAX_ID ? 1 : id + 1;
    return new Promise((resolve, reject) => {
      const data = encodeRequest({ ...frame, id });
      this.pending.set(id, { resolve, reject, sent: performance.now() });
      this.ws.send(data);
    });
  }

  receive(data) {
    let reply;
    try {
      reply = decodeReply(new Uint8Array(data));
    } catch (err) {
      // A frame we cannot read leaves the stream unusable: end the session.
      this.lost(`the server sent a frame this page cannot read (${err.code ?? "error"}: ${err.message})`);
      this.ws.close();
      return;
    }
    if (reply.op === "error" && reply.fatal) this.fatal = `${reply.code}: ${reply.message}`;
    if (reply.op === "error" && reply.id === null) {
      const err = new RemoteError(reply);
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
      return;
    }
    const waiter = this.pending.get(reply.id);
    if (waiter === undefined) return; // a reply to nothing we asked: ignore it
    this.pending.delete(reply.id);
    this.latency = performance.now() - waiter.sent;
    if (reply.op === "error") waiter.reject(new RemoteError(reply));
    else waiter.resolve(reply);
  }

  lost(why) {
    if (this.closed) return;
    this.closed = true;
    const err = new Error(why);
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this.onlost?.(why);
  }

  async close() {
    if (this.closed) return;
    try {
      await this.request({ op: "close" });
    } catch {
      // already going away: closing the socket below is all that is left
    }
    this.closed = true;
    this.ws.close(1000);
  }
}
