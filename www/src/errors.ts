// Errors in plain words, each with what to do next. The engine rejects with an Error whose
// `name` is NoWebGPU, Quota, BadInput, NotFound, Busy, Device, DeviceLost, Budget or Error
// (notes/ENGINE_API.md).

export function errorName(e: unknown): string {
  if (e && typeof e === 'object' && 'name' in e) return String((e as { name: unknown }).name);
  return 'Error';
}

export function errorMessage(e: unknown): string {
  if (e && typeof e === 'object' && 'message' in e) return String((e as { message: unknown }).message);
  return String(e);
}

/** The engine's message, less a repeated "Error: " and trailing period. */
function detail(e: unknown): string {
  return errorMessage(e).replace(/^(\w*Error:\s*)+/, '').replace(/\.$/, '');
}

/** Two lines: what happened, then what to do (shown by ui.showAlert). `doing` says what the
 *  page was trying, e.g. "Could not download the model". */
export function explain(e: unknown, doing: string): string {
  const name = errorName(e);
  const msg = detail(e);
  switch (name) {
    case 'NoWebGPU':
      return (
        'This browser has no WebGPU, which webtune needs to use the graphics card.\n' +
        'Use a recent Chrome or Edge (113 or later) or Safari 26 with hardware acceleration on. ' +
        'On Linux, Chrome may need chrome://flags/#enable-unsafe-webgpu.'
      );
    case 'Quota':
      return (
        `${doing}: the browser refused to store more (${msg}).\n` +
        'Delete a stored model or training run you no longer need, or free some disk space, then try again.'
      );
    case 'BadInput':
      return `${doing}: ${msg}.\nCheck that the file or field is the right one and try again.`;
    case 'NotFound':
      return `${doing}: ${msg}.\nCheck the name; if a stored item is missing, import it again.`;
    case 'Busy':
      return `${doing}: the engine is still busy with something else.\nWait for it to finish, or pause training first, then try again.`;
    case 'Device':
      return (
        `${doing}: the graphics card stopped responding (${msg}).\n` +
        'Reload the page: your examples, stored models and saved training runs are kept. ' +
        'A shorter sequence length, a smaller batch or q4 weights need less memory.'
      );
    case 'DeviceLost':
      return (
        `${doing}: the graphics card was reset or taken away, and what was on it is gone.\n` +
        'Nothing stored is lost. Load the model again, or open the training run to resume it from its last saved step.'
      );
    case 'Budget':
      return (
        `${doing}: this needs more graphics memory than the budget allows (${msg}).\n` +
        'Lower the sequence length, the batch or the rank, or choose q4 weights, then resume: the last saved step is kept.'
      );
    case 'TypeError':
      if (/fetch|network/i.test(msg)) {
        return `${doing}: the server could not be reached.\nCheck your connection and the server address, then try again; the download resumes where it stopped.`;
      }
      return `${doing}: ${msg}.\nReload the page and try again.`;
    case 'AbortError':
      return `${doing}: cancelled.`;
    default:
      return `${doing}: ${msg}.\nIf it keeps happening, reload the page; your data is kept.`;
  }
}
