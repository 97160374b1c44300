// Written by agensh into each worker's pi home: the organization's tools (the hub's MCP
// server, through the node) as pi tools. pi has no MCP client of its own. The endpoint and
// the worker's token are read from agensh-mcp.json next to this directory (mode 0600),
// never from the environment.
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import { Type } from "typebox";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export default async function (pi: ExtensionAPI) {
  const dir = process.env.PI_CODING_AGENT_DIR ?? join(process.env.HOME ?? "", ".pi", "agent");
  const conf = JSON.parse(readFileSync(join(dir, "agensh-mcp.json"), "utf8"));
  let session: string | undefined;
  let next = 1;
  async function post(body: object): Promise<any> {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${conf.token}`,
    };
    if (session) headers["mcp-session-id"] = session;
    const res = await fetch(conf.url, { method: "POST", headers, body: JSON.stringify(body) });
    const sid = res.headers.get("mcp-session-id");
    if (sid) session = sid;
    const text = await res.text();
    return text ? JSON.parse(text) : {};
  }
  async function call(method: string, params: object): Promise<any> {
    const answer = await post({ jsonrpc: "2.0", id: next++, method, params });
    if (answer.error) throw new Error(`${method}: ${answer.error.message}`);
    return answer.result;
  }
  await call("initialize", {
    protocolVersion: "2025-06-18",
    capabilities: {},
    clientInfo: { name: "agensh-pi-tools", version: "1" },
  });
  await post({ jsonrpc: "2.0", method: "notifications/initialized" });
  const { tools } = await call("tools/list", {});
  for (const t of tools) {
    const description: string = t.description ?? t.name;
    pi.registerTool({
      name: t.name,
      label: t.name,
      description,
      promptSnippet: description.split("\n")[0],
      parameters: Type.Unsafe(t.inputSchema ?? { type: "object", properties: {} }),
      async execute(_id: string, params: object) {
        const r = await call("tools/call", { name: t.name, arguments: params ?? {} });
        const text = (r.content ?? [])
          .filter((c: any) => c.type === "text")
          .map((c: any) => c.text)
          .join("\n\n");
        if (r.isError) throw new Error(text);
        return { content: [{ type: "text", text }], details: {} };
      },
    });
  }
}
