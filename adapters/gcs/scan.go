package gcs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/fencegate/fencegate/adapters/objectstore"
)

// ObjectVars are the template variables of one object (bucket, object),
// as Inspect derives them for a request writing it.
func (u *Upstream) ObjectVars(bucket, object string) map[string]string { return vars(bucket, object) }

// maxListPage bounds one page of an object listing the gateway reads (the
// store's pages are at most 1,000 objects).
const maxListPage = 64 << 20

// ScanStamps lists bucket under prefix (objects.list, which carries each
// object's custom metadata, so one request per page of objects) and calls
// fn with the stamp of every object that has one, with the gateway's
// credentials. Objects without a stamp (written before stamping was on,
// or around the gateway) are skipped and counted in unstamped; a malformed
// stamp is an error, not a guess. Memory is bounded by one listing page.
func (u *Upstream) ScanStamps(ctx context.Context, bucket, prefix string, fn func(objectstore.Stamp) error) (unstamped int, err error) {
	scan := &objectstore.StampScan{Collection: bucket, Key: u.scanKey, Fn: fn}
	page := ""
	for {
		q := url.Values{"prefix": {prefix}, "fields": {"items(name,metadata),nextPageToken"}}
		if page != "" {
			q.Set("pageToken", page)
		}
		var list struct {
			Items []struct {
				Name     string            `json:"name"`
				Metadata map[string]string `json:"metadata"`
			} `json:"items"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := u.getJSON(ctx, "/storage/v1/b/"+url.PathEscape(bucket)+"/o?"+q.Encode(), &list); err != nil {
			return scan.Unstamped, fmt.Errorf("list %s/%s: %w", bucket, prefix, err)
		}
		for _, o := range list.Items {
			v, ok := o.Metadata[u.scanKey]
			if err := scan.Object(o.Name, v, ok); err != nil {
				return scan.Unstamped, err
			}
		}
		if list.NextPageToken == "" || list.NextPageToken == page {
			return scan.Unstamped, nil
		}
		page = list.NextPageToken
	}
}

// getJSON reads the JSON API resource at path (with its query) into v.
func (u *Upstream) getJSON(ctx context.Context, path string, v any) error {
	resp, err := u.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxListPage+1))
	if err != nil {
		return err
	}
	if len(b) > maxListPage {
		return fmt.Errorf("the answer exceeds %d bytes", maxListPage)
	}
	return json.Unmarshal(b, v)
}
