"""`python -m gristmill [ENDPOINT]`: show the cluster and how to reach it over S3."""

import sys

from .client import Client


def main() -> None:
    client = Client(sys.argv[1] if len(sys.argv) > 1 else None)
    smap = client.cluster_map()
    print(f"endpoint: {client.endpoint}")
    print(f"cluster map v{smap['version']}: {len(smap['pmap'])} proxies, {len(smap['tmap'])} targets")
    s3 = client.s3_settings()
    print(f"S3 endpoint: {s3['endpoint']} (path-style, region {s3['region']})")
    if s3["anonymous"]:
        print(f"S3 auth off: unsigned requests work, and so does access key {s3['access_key']!r} "
              f"/ secret {s3['secret_key']!r}")
        print(f"  boto3.client('s3', endpoint_url={s3['endpoint']!r}, aws_access_key_id={s3['access_key']!r}, "
              f"aws_secret_access_key={s3['secret_key']!r}, region_name='us-east-1')")
    else:
        print("S3 auth on: use the access key and secret configured for your user")


if __name__ == "__main__":
    main()
