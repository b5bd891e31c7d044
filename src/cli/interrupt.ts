/** SIGINT/SIGTERM during `migrate`, as Helm, Terraform and kubectl treat them: docs/migrate-one-crd.md#stopping-a-run-ctrl-c. */
import { InterruptedError } from '../errors.js'

/** How to lift a freeze by hand (README: unfreezing by hand), as the migrator or a break-glass identity. */
export function unfreezeCommand(crd: string, annotation: string): string {
  return `kubectl annotate crd ${crd} ${annotation}-`
}

/** 128 + the signal's number, as shells report a process ended by it. */
export function exitCodeFor(signal: NodeJS.Signals): number {
  return signal === 'SIGTERM' ? 143 : 130
}

const list = (names: readonly string[]) => names.join(', ')

/** What is said on the `n`th signal, `inFlight` being the CRDs still running (or lifting their freeze). */
export function interruptMessage(n: number, signal: NodeJS.Signals, inFlight: readonly string[], annotation: string): string {
  if (n === 1)
    return inFlight.length
      ? `crd-migrator: interrupted (${signal}): stopping writes, lifting the freeze of ${list(inFlight)}…\n`
      : `crd-migrator: interrupted (${signal}): stopping…\n`
  if (inFlight.length === 0) return `crd-migrator: interrupted again (${signal}): nothing left frozen by this run; exiting\n`
  const byHand = inFlight.map((crd) => `  ${unfreezeCommand(crd, annotation)}\n`).join('')
  if (n === 2)
    return (
      `crd-migrator: interrupted again (${signal}): still lifting the freeze of ${list(inFlight)}. Interrupt once more to exit at once: ` +
      `the CRD may then stay frozen (writes to it refused). To lift a freeze by hand, as the migrator or a break-glass identity:\n${byHand}`
    )
  return `crd-migrator: exiting without lifting the freeze: ${list(inFlight)} may stay frozen; to lift it by hand:\n${byHand}`
}

/** The hint after an interrupted run: the CRDs it did not finish, to run again. */
export function resumeHint(unfinished: readonly string[]): string {
  return `run \`crd-migrator migrate ${unfinished.join(' ')}\` again (with the same flags) to resume; a CRD finished meanwhile is skipped as up to date\n`
}

export class Interrupt {
  private readonly controller = new AbortController()
  /** Aborted by the first signal, with a CRDM_ABORTED error naming it. */
  readonly signal = this.controller.signal
  /** The first signal received. */
  received: NodeJS.Signals | undefined
  private count = 0
  /** The CRDs running now (set by `migrate`): named in what each signal says. */
  readonly inFlight = new Set<string>()
  /** Where the messages go: `migrate` points this past its live progress lines. */
  write: (text: string) => void = (text) => void process.stderr.write(text)

  constructor(
    private readonly annotation: string,
    private readonly exit: (code: number) => void = (code) => process.exit(code),
  ) {}

  install(): void {
    const on = (sig: NodeJS.Signals) => this.handle(sig)
    process.on('SIGINT', on)
    process.on('SIGTERM', on)
  }

  handle(sig: NodeJS.Signals): void {
    this.count++
    this.received ??= sig
    const inFlight = [...this.inFlight]
    this.write(interruptMessage(this.count, sig, inFlight, this.annotation))
    if (this.count === 1) this.controller.abort(new InterruptedError(sig))
    else if (this.count >= 3 || inFlight.length === 0) this.exit(exitCodeFor(this.received))
  }

  get exitCode(): number | undefined {
    return this.received && exitCodeFor(this.received)
  }
}
