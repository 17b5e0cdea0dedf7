// writ's plugin for opencode (`writ hook opencode --print-plugin` prints
// it; put it in .opencode/plugin/). opencode has no command hooks: this
// plugin hands each tool call to `writ hook opencode` before and after it
// runs, and a denial throws, which opencode reports to the model as the
// tool's error. A hook that cannot run throws too: a write writ cannot
// judge does not happen.
// How writ is run (`writ config opencode --write` puts the way it was run).
const WRIT = ["writ"];

export const WritPlugin = async ({ directory }) => {
  const args = new Map();
  const hook = async (event) => {
    const proc = Bun.spawn([...WRIT, "hook", "opencode"], {
      cwd: directory,
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
    });
    proc.stdin.write(JSON.stringify({ cwd: directory, ...event }));
    proc.stdin.end();
    const out = await new Response(proc.stdout).text();
    await proc.exited;
    return out.trim() ? JSON.parse(out) : null;
  };
  return {
    "chat.message": async (input) => {
      await hook({ hook_event_name: "chat.message", session_id: input.sessionID });
    },
    "tool.execute.before": async (input, output) => {
      args.set(input.callID, output.args);
      const decision = await hook({
        hook_event_name: "tool.execute.before",
        session_id: input.sessionID,
        call_id: input.callID,
        tool: input.tool,
        args: output.args,
      });
      // A shell command sent through `writ run`: opencode runs the tool
      // with the arguments as the hooks leave them.
      if (decision && decision.args) {
        Object.assign(output.args, decision.args);
      }
      if (decision && decision.decision === "deny") {
        args.delete(input.callID);
        // opencode hands the model the message alone, with no error
        // marker: the first words say the call did not happen.
        throw new Error(`Blocked by writ, nothing was changed: ${decision.reason}`);
      }
    },
    "tool.execute.after": async (input, output) => {
      const called = args.get(input.callID) ?? input.args ?? {};
      args.delete(input.callID);
      await hook({
        hook_event_name: "tool.execute.after",
        session_id: input.sessionID,
        call_id: input.callID,
        tool: input.tool,
        args: called,
        output: typeof output.output === "string" ? output.output : null,
      });
    },
  };
};
