/**
 * One migration per resource at a time in this process. The CRD controller and the
 * StorageVersionMigration controller share it: both run as the same owner, and two runs
 * of one owner on one CRD would each take the other's freeze for their own.
 */
export class RunLock {
  private readonly tails = new Map<string, Promise<unknown>>()

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve()
    const mine = previous.catch(() => undefined).then(fn)
    const tail = mine.catch(() => undefined)
    this.tails.set(key, tail)
    try {
      return await mine
    } finally {
      if (this.tails.get(key) === tail) this.tails.delete(key)
    }
  }
}
