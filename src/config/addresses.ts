import { isIP, isIPv6 } from 'node:net'

/** An IP or CIDR, IPv4 or IPv6 (webhook.apiServerAddresses). */
export function isAddressOrCidr(entry: string): boolean {
  const [ip, bits, extra] = entry.split('/')
  if (extra !== undefined || !ip || isIP(ip) === 0) return false
  if (bits === undefined) return true
  if (!/^\d{1,3}$/.test(bits)) return false
  return Number(bits) <= (isIPv6(ip) ? 128 : 32)
}
