// The `macaroon` package ships no types; this names the part of its API gpumesh uses.
declare module 'macaroon' {
  export interface Caveat {
    identifier: Uint8Array;
    location?: string;
    vid?: Uint8Array;
  }
  export interface Macaroon {
    readonly caveats: Caveat[];
    readonly location: string;
    readonly identifier: Uint8Array;
    readonly signature: Uint8Array;
    addFirstPartyCaveat(caveatId: string | Uint8Array): void;
    clone(): Macaroon;
    verify(rootKey: Uint8Array, check: (condition: string) => string | null, discharges?: Macaroon[]): void;
    exportBinary(): Uint8Array;
    exportJSON(): object;
  }
  export function newMacaroon(params: { identifier: string | Uint8Array; location?: string; rootKey: string | Uint8Array; version?: 1 | 2 }): Macaroon;
  export function importMacaroon(data: string | Uint8Array | object): Macaroon;
  export function bytesToBase64(bytes: Uint8Array): string;
  export function base64ToBytes(text: string): Uint8Array;
}
