/** The client_blobs table: which grant lineage (its id) stored which blob; grants of the lineage may name it as an input. */
export interface ClientBlobTable {
  recordClientBlob(digest: string, grantId: string, now: number): void;
  storedBy(digest: string, grantId: string): Promise<boolean>;
  /** The lineage no longer keeps the file (it deleted it): its record goes. */
  forgetClientBlob(digest: string, grantId: string): void;
}
